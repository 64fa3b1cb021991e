"""sglang_wheel_file: a file's text read out of a wheel on the control node, or an error naming the wheel."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError
from ansible_collections.sglang.fleet.plugins.lookup.sglang_wheel_file import wheel_file


def test_a_members_text_is_read_without_unpacking(tmp_path: Path) -> None:
    wheel = tmp_path / "litellm-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("litellm/tokenizers/vocab", "aGVsbG8= 0\nd29ybGQ= 1\n")
    assert wheel_file(str(wheel), "litellm/tokenizers/vocab") == "aGVsbG8= 0\nd29ybGQ= 1\n"
    with pytest.raises(AnsibleLookupError, match=r"litellm-1\.0-py3-none-any\.whl has no litellm/other"):
        wheel_file(str(wheel), "litellm/other")
    with pytest.raises(AnsibleLookupError, match=r"missing\.whl"):
        wheel_file(str(tmp_path / "missing.whl"), "litellm/tokenizers/vocab")
