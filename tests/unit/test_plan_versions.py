"""Preflight across SGLang versions: each host is checked against its sglang_version's support table, and a
setting another supported version knows is named with that version (what a host moving between them hears)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Plan = Callable[..., dict[str, Any]]
ROOT = Path(__file__).resolve().parents[2]


def _table(version: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((ROOT / f"roles/sglang_plan/files/sglang-{version}.json").read_text())
    return table


def _options(version: str) -> set[str]:
    return {option for action in _table(version)["flags"] for option in action["option_strings"]}


def _production_flags(host: str) -> set[str]:
    import yaml

    host_vars = yaml.safe_load((ROOT / f"inventory/production/host_vars/{host}.yml").read_text())
    flags = {"--" + key for key in host_vars.get("sglang_server_args", {})}
    return flags | {"--speculative-" + key.replace("_", "-") for key in host_vars.get("sglang_speculative", {})}


# Every release from 0.5.17 to the newest, and the torch each one's wheel pins (its Requires-Dist).
SUPPORTED = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
TORCH = {"0.5.17": "2.11.0", **{f"0.5.{n}": "2.13.0" for n in (18, 19, 20, 21)}, "0.5.22": "2.14.1", "0.5.23": "2.14.1"}


def test_every_supported_version_has_its_table_and_constraints() -> None:
    tables = sorted(path.name for path in (ROOT / "roles/sglang_plan/files").glob("sglang-*.json"))
    assert tables == [f"sglang-{version}.json" for version in SUPPORTED]
    for version in SUPPORTED:
        # Extracted from the real wheel into both the product's and the simulator's own copy
        # (tests/simulator/test_owns_its_model.py checks they are the same bytes).
        assert _table(version)["sglang_version"] == version
        constraints = (ROOT / f"roles/sglang_venv/files/constraints-{version}.txt").read_text().splitlines()
        assert f"sglang=={version}" in constraints and "smg==1.13.0" in constraints
        assert not any(line.startswith("sglang-router==") for line in constraints)
    for version, torch in TORCH.items():
        assert f"torch=={torch}" in (ROOT / f"roles/sglang_venv/files/constraints-{version}.txt").read_text().splitlines()


# Of the production hosts' flags, those SGLang 0.5.17's real parser does not know: none. 0.5.17 already has
# --mamba-radix-cache-strategy and --cuda-graph-max-bs-decode (the 0.5.2x names the host_vars use), and the
# qwen3 / qwen3_coder parsers; 0.5.23's extra flags (96 of them, e.g. --enable-hicache) are not used.
PRODUCTION_FLAGS_0_5_17_LACKS: dict[str, set[str]] = {"b200": set(), "ct129": set()}


@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("host", ["b200", "ct129"])
def test_production_settings_pass_under_every_release(plan: Plan, host: str, version: str) -> None:
    """Every flag of both production hosts exists in each release from 0.5.17 on, and each release plans them alike."""
    assert _production_flags(host) <= _options(version)
    result = plan(host, sglang_version=version)
    assert result["problems"] == []
    assert result["instances"] == plan(host)["instances"]


@pytest.mark.parametrize("host", ["b200", "ct129"])
def test_production_settings_under_0_5_17(plan: Plan, host: str) -> None:
    assert _production_flags(host) - _options("0.5.17") == PRODUCTION_FLAGS_0_5_17_LACKS[host]
    result = plan(host, sglang_version="0.5.17")
    assert result["problems"] == []
    assert result["instances"] == plan(host)["instances"], "the same command lines under both versions"


def test_0_5_23_flags_on_a_host_moved_to_0_5_17(plan: Plan) -> None:
    args = {**plan("b200")["instances"][0]["settings"]}
    args.pop("enable-hierarchical-cache")
    args.update({"enable-hicache": True, "hicache-host-memory-fraction": 0.5})
    assert {"--enable-hicache", "--hicache-host-memory-fraction"} <= _options("0.5.23") - _options("0.5.17")
    assert plan("b200", sglang_version="0.5.17", sglang_server_args=args)["problems"] == [
        "b200 host: sglang_server_args.enable-hicache=true: SGLang 0.5.17 has no flag --enable-hicache "
        "(SGLang 0.5.23 has it); fix: use --enable-hierarchical-cache (its name in SGLang 0.5.17) "
        "or pin sglang_version 0.5.23",
        "b200 host: sglang_server_args.hicache-host-memory-fraction=0.5: SGLang 0.5.17 has no flag "
        "--hicache-host-memory-fraction (SGLang 0.5.21-0.5.23 has it); fix: remove it or pin sglang_version 0.5.23",
    ]


def test_0_5_17_flags_on_a_0_5_23_host(plan: Plan) -> None:
    assert "--keep-mm-feature-on-device" in _options("0.5.17") - _options("0.5.23")
    problems = plan("b200", sglang_server_args={"keep-mm-feature-on-device": True, "cuda-graph-max-bs": 8})["problems"]
    assert problems == [
        "b200 host: sglang_server_args.keep-mm-feature-on-device=true: SGLang 0.5.23 has no flag "
        "--keep-mm-feature-on-device (SGLang 0.5.17-0.5.20 has it); fix: remove it or pin sglang_version 0.5.20",
        # 0.5.17 has it only as a deprecated alias: no reason to pin 0.5.17 for it.
        "b200 host: sglang_server_args.cuda-graph-max-bs=8: --cuda-graph-max-bs was removed after SGLang 0.5.19 "
        "(gone in 0.5.20; deprecated in 0.5.19); fix: use --cuda-graph-max-bs-decode",
    ]
    # 0.5.17 accepts --cuda-graph-max-bs as a deprecated alias of --cuda-graph-max-bs-decode (a value, not a switch).
    assert plan("b200", sglang_version="0.5.17", sglang_server_args={"cuda-graph-max-bs": 8})["problems"] == []


def test_flags_retired_before_0_5_17(plan: Plan) -> None:
    problems = plan("b200", sglang_version="0.5.17", sglang_server_args={"hybrid-kvcache-ratio": 0.5})["problems"]
    assert problems == [
        "b200 host: sglang_server_args.hybrid-kvcache-ratio=0.5: --hybrid-kvcache-ratio does not exist in "
        "SGLang 0.5.17; fix: use --swa-full-tokens-ratio"
    ]


def test_environment_across_versions(plan: Plan) -> None:
    old = plan("b200", sglang_version="0.5.17", sglang_environment={"SGLANG_ENABLE_SPEC_V2": "1"})["problems"]
    assert old == [], "0.5.17 still reads SGLANG_ENABLE_SPEC_V2"
    (new,) = plan("b200", sglang_environment={"SGLANG_ENABLE_SPEC_V2": "1"})["problems"]
    assert "SGLang 0.5.23 no longer reads it and ignores it silently (SGLang 0.5.17-0.5.20 reads it)" in new
    (only_old,) = plan("b200", sglang_environment={"SGLANG_DFLASH_PREFILL_REFILL_TARGET": "1"})["problems"]
    assert only_old == (
        'b200 host: sglang_environment.SGLANG_DFLASH_PREFILL_REFILL_TARGET="1": SGLang 0.5.23 does not read '
        "SGLANG_DFLASH_PREFILL_REFILL_TARGET and would ignore it silently (SGLang 0.5.17-0.5.20 reads it); "
        "fix: remove SGLANG_DFLASH_PREFILL_REFILL_TARGET or pin sglang_version 0.5.20"
    )


def test_architectures_across_versions(support_tables: list[dict[str, Any]], model_facts: dict[str, Any]) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    assert "Qwen3_5ForConditionalGeneration" in _table("0.5.17")["architectures"]
    mamba = {**model_facts, "architectures": ["MambaForCausalLM"]}
    settings = plan_settings("b200", sglang_version="0.5.17", sglang_speculative={})
    (problem,) = sglang_plan(settings, {**host_facts("b200", model_facts), "model": mamba}, support_tables)["problems"]
    assert "architecture ['MambaForCausalLM'] is not supported by SGLang 0.5.17 (SGLang 0.5.20-0.5.23 supports it)" in problem
    assert problem.endswith("fix: pin sglang_version 0.5.23 or serve another model")


def test_tables_given_by_their_files_plan_as_the_tables_themselves(
    support_tables: list[dict[str, Any]], model_facts: dict[str, Any]
) -> None:
    """The action gives the filter the tables' paths (the role's files/sglang-*.json); it reads them, the same tables."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    paths = [str(path) for path in sorted((ROOT / "roles/sglang_plan/files").glob("sglang-*.json"))]
    cases: list[tuple[str, dict[str, Any]]] = [("0.5.23", {}), ("0.5.17", {"sglang_environment": {"SGLANG_ENABLE_SPEC_V2": "1"}})]
    for version, variables in cases:
        settings = plan_settings("b200", sglang_version=version, **variables)
        facts = host_facts("b200", model_facts)
        by_path = sglang_plan(settings, facts, paths)
        assert by_path == sglang_plan(settings, facts, support_tables)
        assert len(by_path["instances"]) == 7
    assert sglang_plan(plan_settings("b200", sglang_version="0.5.99"), facts, paths)["problems"] == [
        'b200 host: sglang_version="0.5.99": sglang-fleet has no support table for SGLang 0.5.99 '
        "(supported: 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23); fix: pin one of the supported versions"
    ]


def test_unknown_version_is_one_problem(plan: Plan) -> None:
    result = plan("b200", sglang_version="0.5.99")
    assert result == {
        "instances": [],
        "problems": [
            'b200 host: sglang_version="0.5.99": sglang-fleet has no support table for SGLang 0.5.99 '
            "(supported: 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23); fix: pin one of the supported versions"
        ],
    }


def test_missing_constraints_file(plan: Plan) -> None:
    (problem,) = plan("ct129", sglang_version="0.5.17", versions=["0.5.23"])["problems"]
    assert problem.startswith('ct129 host: sglang_version="0.5.17": roles/sglang_venv/files/constraints-0.5.17.txt is missing')


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ("simulator", {"SGLANG_SIM_VERSION": "0.5.17", "SGLANG_SIM_LOAD_SECONDS": "1"}),
        ("sglang", {"SGLANG_SIM_LOAD_SECONDS": "1"}),
    ],
)
def test_the_simulator_stands_in_for_the_pinned_version(runtime: str, expected: dict[str, str]) -> None:
    import yaml
    from venv_host import ROLE_VARS, venv_host

    host = venv_host(runtime, version="0.5.17", runtime_environment={"SGLANG_SIM_LOAD_SECONDS": "1"})
    assert host["runtime"]["environment"] == expected
    # The servers get it through the role's published fact (sglang_runtime.environment), the checker's marker is named
    # by it (a changed environment parses again).
    server_vars = (ROOT / "roles/sglang_server/vars/main.yml").read_text()
    assert "sglang_server_environment(sglang_server_home, sglang_runtime.environment," in server_vars
    preflight = (ROOT / "roles/sglang_venv/tasks/preflight.yml").read_text()
    [published] = [
        task["ansible.builtin.set_fact"]["sglang_runtime"]
        for task in yaml.safe_load(preflight)
        if "sglang_runtime" in (task.get("ansible.builtin.set_fact") or {})
    ]
    assert published == "{{ _sglang_venv_host.runtime }}"
    assert venv_host(runtime, version="0.5.17")["parsed_marker"] != host["parsed_marker"], "parsed again"
    assert ROLE_VARS["_sglang_venv_args_parser"][runtime], "each runtime names its own parser"


def test_a_host_moved_from_0_5_17_is_told_when_each_retired_flag_went_and_what_replaces_it(plan: Plan) -> None:
    """Moving a host from 0.5.17 to 0.5.23: each flag a later release retired names the release that removed it (every
    release in between has its table), the last one that accepts it, and its replacement (or none)."""
    args = {"cuda-graph-max-bs": 8, "stream-output": True, "collect-tokens-histogram": True, "torchao-config": "int4wo-128"}
    assert plan("b200", sglang_version="0.5.17", sglang_server_args=args)["problems"] == []
    # --cuda-graph-max-bs: a deprecated alias in 0.5.17-0.5.19 (new_flag="--cuda-graph-max-bs-decode"), gone in 0.5.20.
    table_19 = {o: a for a in _table("0.5.19")["flags"] for o in a["option_strings"]}
    assert table_19["--cuda-graph-max-bs"]["deprecated_use_instead"] == "--cuda-graph-max-bs-decode"
    assert "--cuda-graph-max-bs" not in _options("0.5.20") and "--cuda-graph-max-bs-decode" in _options("0.5.23")
    problems = plan("b200", sglang_version="0.5.23", sglang_server_args=args)["problems"]
    assert problems == [
        "b200 host: sglang_server_args.cuda-graph-max-bs=8: --cuda-graph-max-bs was removed after SGLang 0.5.19 "
        "(gone in 0.5.20; deprecated in 0.5.19); fix: use --cuda-graph-max-bs-decode",
        "b200 host: sglang_server_args.stream-output=true: --stream-output was removed after SGLang 0.5.19 "
        "(gone in 0.5.20; deprecated in 0.5.19); fix: use --incremental-streaming-output",
        "b200 host: sglang_server_args.collect-tokens-histogram=true: --collect-tokens-histogram was removed after "
        "SGLang 0.5.19 (gone in 0.5.20; deprecated in 0.5.19); fix: remove the setting",
        'b200 host: sglang_server_args.torchao-config="int4wo-128": SGLang 0.5.23 has no flag --torchao-config '
        "(SGLang 0.5.17 has it); fix: remove it or pin sglang_version 0.5.17",
    ]
    # A host pinned to the release that removed it hears the same.
    (on_20,) = plan("b200", sglang_version="0.5.20", sglang_server_args={"cuda-graph-max-bs": 8})["problems"]
    assert "--cuda-graph-max-bs was removed after SGLang 0.5.19 (gone in 0.5.20; deprecated in 0.5.19)" in on_20
