"""The facts the collection's modules set (module sglang_host_facts and sglang_plan: `sglang_host`) are read as
ansible_facts.sglang_host everywhere: ansible-core 2.20 deprecates facts injected as top-level variables
(INJECT_FACTS_AS_VARS) and warns on each read, and with inject_facts_as_vars = false such a read is undefined (a
`| default(...)` after it then hides the facts altogether)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fleet import ROOT

# A read of the fact as a top-level variable: the name not preceded by a dot, a word character or a quote (hostvars's
# ansible_facts['sglang_host'] and ansible_facts.sglang_host are fine), followed by an attribute, a filter or an index.
TOP_LEVEL = re.compile(r"(?<![\w.'\"])sglang_host(?![\w])\s*[.|\[]")


def sources() -> list[Path]:
    files = [ROOT / "deploy.yml"]
    for folder in ("roles", "playbooks"):
        files += sorted((ROOT / folder).rglob("*.yml")) + sorted((ROOT / folder).rglob("*.j2"))
    files += sorted((ROOT / "plugins" / "filter").glob("*.yml"))
    return files


@pytest.mark.parametrize("path", sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_modules_facts_are_read_through_ansible_facts(path: Path) -> None:
    found = [match.group(0) for match in TOP_LEVEL.finditer(path.read_text())]
    assert not found, f"{path.relative_to(ROOT)} reads sglang_host as a top-level variable: {sorted(set(found))}"
