"""Facts are read as ansible_facts[...] (issue 37): ansible-core 2.20 deprecates facts injected as top-level variables
(INJECT_FACTS_AS_VARS) and warns on every read; with that setting off, a bare read is undefined, which a
`| default(...)` would hide (the rendezvous check's `sglang_host.listening | default([])` then saw no listening port).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fleet import ROOT

JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
# The fact module sglang_host_facts sets, and Ansible's own facts the project reads, as a bare variable.
BARE_FACT = re.compile(
    r"(?<![\w.'\"\[])(sglang_host|ansible_(?:date_time|hostname|fqdn|os_family|distribution\w*|default_ipv[46]"
    r"|memtotal_mb|processor\w*|architecture|kernel|pkg_mgr|service_mgr|env|interfaces|all_ipv[46]_addresses))(?![\w])"
)


def sources() -> list[Path]:
    """Every file whose Jinja Ansible templates: roles' YAML and templates, playbooks, the filters' documentation."""
    patterns = ["roles/*/*/*.yml", "roles/*/templates/*.j2", "playbooks/*.yml", "plugins/filter/*.yml"]
    return sorted(path for pattern in patterns for path in ROOT.glob(pattern))


def bare_reads(text: str) -> list[str]:
    return [match.group(1) for expression in JINJA.findall(text) for match in BARE_FACT.finditer(expression)]


def test_a_bare_fact_read_is_found() -> None:
    assert bare_reads('x: "{{ sglang_host.listening | default([]) }}"') == ["sglang_host"]
    assert bare_reads('x: "{{ ansible_date_time.epoch }}"') == ["ansible_date_time"]
    assert bare_reads('x: "{{ ansible_facts.sglang_host.listening }}"') == []
    assert bare_reads("x: \"{{ hostvars[h]['sglang_host'] }}\"") == []


@pytest.mark.parametrize("path", sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_facts_are_read_as_ansible_facts(path: Path) -> None:
    assert bare_reads(path.read_text()) == [], f"{path.relative_to(ROOT)}: read the fact as ansible_facts.<name>"
