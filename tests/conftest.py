"""Shared fixtures: the repository's roles, inventories and fixtures as the tests see them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The repository is the collection sglang.fleet (collections/ansible_collections/sglang/fleet links to it): tests import
# its plugins as Ansible does, ansible_collections.sglang.fleet.plugins.<kind>.<name>. The test-host role's filter is
# the test double's own, on the path by its folder.
sys.path[:0] = [str(ROOT / "collections"), str(ROOT / "roles/testhost/filter_plugins")]

MODEL_FIXTURE = ROOT / "tests/fixtures/models/Qwen3.6-27B"
GPU_SHAPES = {"ct129": (2, "NVIDIA RTX A6000", 49140), "b200": (7, "NVIDIA B200", 183359)}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="session")
def support_table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads((ROOT / "roles/sglang_plan/files/sglang-0.5.23.json").read_text())
    return table


@pytest.fixture(scope="session")
def support_tables() -> list[dict[str, Any]]:
    """The tables the action sglang_plan reads (by their paths): every roles/sglang_plan/files/sglang-<version>.json."""
    return [json.loads(path.read_text()) for path in sorted((ROOT / "roles/sglang_plan/files").glob("sglang-*.json"))]


def plan_settings(host: str, *, versions: list[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """The plan's settings as the action sglang_plan gathers them for a production host (plugin_utils/plan_settings.py),
    with variables overridden (and `versions`, those with a constraints file). The host serves the stand-in of
    production's model by its path (as Molecule's hosts do: inventory/sandbox/group_vars/all.yml)."""
    from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import MISSING
    from ansible_collections.sglang.fleet.plugins.plugin_utils.plan_settings import constraints_versions
    from ansible_collections.sglang.fleet.plugins.plugin_utils.plan_settings import plan_settings as gather

    variables = {
        **load_yaml(ROOT / "roles/sglang_plan/defaults/main.yml"),
        "sglang_model_path": load_yaml(ROOT / "inventory/sandbox/group_vars/all.yml")["sglang_model_path"],
        **load_yaml(ROOT / f"inventory/production/host_vars/{host}.yml"),
        **overrides,
    }

    def variable(name: str, default: Any) -> Any:
        return variables[name] if name in variables or default is MISSING else default

    name = str(variables.get("inventory_hostname", host))  # a test may plan a host of production's shape by another name
    return gather(
        variable,
        name,
        variables.get("hostvars", {}).get(name, {}).keys(),
        versions or constraints_versions(str(ROOT / "roles/sglang_venv/files")),
    )


# The stand-in's files besides its shards, as the test hosts get them: real SGLang refuses a multimodal checkpoint
# without its processor or chat template, and so does preflight.
STAND_IN_FILES = yaml.safe_load((ROOT / "roles/testhost/vars/main.yml").read_text())["_testhost_model_files"]


def stand_in_model(directory: Path) -> Path:
    """The Qwen3.6-27B stand-in: real config and index, the processors and chat template of the generated test
    repository, sparse shards of the declared total size."""
    import testhost  # roles/testhost/filter_plugins

    directory.mkdir(parents=True, exist_ok=True)
    for name in STAND_IN_FILES:
        (directory / name).write_text((MODEL_FIXTURE / name).read_text())
    for shard in testhost.testhost_shards({"fixture": str(MODEL_FIXTURE), "path": str(directory)}):
        with open(shard["path"], "wb") as handle:
            handle.truncate(shard["size"])
    return directory


@pytest.fixture
def stand_in_model_dir(tmp_path: Path) -> Path:
    """A fresh Qwen3.6-27B stand-in of the test's own, free to damage."""
    return stand_in_model(tmp_path / "Qwen3.6-27B")


def host_facts(host: str, model: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Facts as sglang_host_facts reports them for a healthy host of that shape."""
    count, name, memory = GPU_SHAPES[host]
    facts = {
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{host}-{i}",
                "name": name,
                "memory_total_mib": memory,
                "memory_used_mib": 0,
                "minor_number": i,
                "device": f"/dev/nvidia{i}",
            }
            for i in range(count)
        ],
        "gpu_processes": [],
        "gpu_error": None,
        "driver_version": "580.95.05",
        "memtotal_mb": 755712 if host == "b200" else 257000,
        "glibc_version": "2.36",
        "listening": [],
        "model": model,
    }
    facts.update(overrides)
    return facts


@pytest.fixture(scope="session")
def model_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe

    directory = stand_in_model(tmp_path_factory.mktemp("models") / "Qwen3.6-27B")
    facts: dict[str, Any] = describe(str(directory), {})
    return facts


@pytest.fixture
def plan(support_tables: list[dict[str, Any]], model_facts: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """plan(host, facts_overrides={...}, **variable_overrides) -> {"instances", "problems"}."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan

    def run(host: str, facts: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
        settings = plan_settings(host, **overrides)
        result: dict[str, Any] = sglang_plan(settings, host_facts(host, model_facts, **(facts or {})), support_tables)
        return result

    return run


# The unit the tests' own fake routers and instances (servers in this pytest process) count as being: a key goes to a
# local port only when its listener is the expected unit's (module_utils/listeners.py); a squatter the tests start as a
# process of its own is not this one.
TESTS_OWN_UNIT = "pytest-fakes.service"


@pytest.fixture(autouse=True)
def fakes_in_this_process_are_the_expected_units(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from ansible_collections.sglang.fleet.plugins.module_utils import listeners

    unit_of, refuse = listeners.unit_of, listeners.refuse_strangers
    me = os.getpid()
    monkeypatch.setattr(listeners, "unit_of", lambda pid, proc="/proc": TESTS_OWN_UNIT if pid == me else unit_of(pid, proc))
    monkeypatch.setattr(
        listeners, "refuse_strangers", lambda port, url, holders, units: refuse(port, url, holders, {*units, TESTS_OWN_UNIT})
    )
