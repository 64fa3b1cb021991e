"""sglang_instance_files ships a file of the collection's module_utils as it is (the router launcher's listeners.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.sglang.fleet.plugins.action.sglang_instance_files import module_utils_file
from fleet import ROOT


def test_a_module_utils_file_is_the_collection_s_own() -> None:
    assert Path(module_utils_file("listeners.py")).resolve() == (ROOT / "plugins/module_utils/listeners.py").resolve()


@pytest.mark.parametrize("name", ["../action/sglang_instance_files.py", "/etc/passwd", "missing.py", "README"])
def test_nothing_else_is_a_module_utils_file(name: str) -> None:
    with pytest.raises(AnsibleActionFail, match="no such file in the collection's module_utils"):
        module_utils_file(name)
