"""Every variable a user can set is documented: in its role's argument spec and in the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from fleet import ROOT

ROLES = sorted(path.parent.parent for path in ROOT.glob("roles/*/meta/argument_specs.yml"))
README = (ROOT / "README.md").read_text()


def spec_options(role: Path) -> set[str]:
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    return {name for entry in specs.values() for name in (entry.get("options") or {})}


def test_every_role_has_an_argument_spec() -> None:
    assert {role.name for role in ROLES} == {path.name for path in (ROOT / "roles").iterdir() if path.is_dir()}


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_every_default_is_in_the_argument_spec(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) if (role / "defaults/main.yml").exists() else {}
    assert set(defaults or {}) <= spec_options(role)


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_every_option_is_in_the_readme(role: Path) -> None:
    own = {name for name in spec_options(role) if name.startswith(role.name.split("_")[0])}
    undocumented = sorted(name for name in own if not re.search(rf"`{re.escape(name)}`", README))
    assert undocumented == [], f"not in README.md: {undocumented}"


@pytest.mark.parametrize("playbook", sorted(ROOT.glob("playbooks/*.yml")), ids=lambda path: path.name)
def test_every_playbook_setting_is_in_the_readme(playbook: Path) -> None:
    settings = {
        name for play in yaml.safe_load(playbook.read_text()) for name in (play.get("vars") or {}) if name.startswith("sglang_")
    }
    undocumented = sorted(name for name in settings if not re.search(rf"`{re.escape(name)}`", README))
    assert undocumented == [], f"not in README.md: {undocumented}"


def test_every_speculative_algorithm_of_the_pinned_version_is_documented() -> None:
    """The README's table and the plan's argument spec name each algorithm the pinned SGLang accepts."""
    pinned = yaml.safe_load((ROOT / "roles/sglang_plan/defaults/main.yml").read_text())["sglang_version"]
    table = yaml.safe_load((ROOT / f"roles/sglang_plan/files/sglang-{pinned}.json").read_text())
    spec = yaml.safe_load((ROOT / "roles/sglang_plan/meta/argument_specs.yml").read_text())["argument_specs"]
    described = " ".join(spec["main"]["options"]["sglang_speculative"]["description"])
    rows = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", README, flags=re.MULTILINE))
    assert set(table["speculative_algorithms"]) <= rows
    assert [name for name in table["speculative_algorithms"] if name not in described] == []
