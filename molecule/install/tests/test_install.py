"""The real SGLang 0.5.23 installed by the roles: it imports, parses the fleet's command lines, refuses a
removed flag naming its replacement, and CUDA's nvcc runs."""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import testinfra.utils.ansible_runner

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests")]
from conftest import host_facts, plan_settings, stand_in_model  # noqa: E402  (puts the collection on the path)
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe  # noqa: E402
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan  # noqa: E402

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")
VENV = "/opt/sglang/sglang-0.5.23"
TABLE = json.loads((ROOT / "roles/sglang_plan/files/sglang-0.5.23.json").read_text())


def production_command_lines() -> dict[str, list[str]]:
    """Every instance's flags for the production ct129 and b200, as deploy.yml renders them."""
    with tempfile.TemporaryDirectory() as directory:
        model = describe(str(stand_in_model(Path(directory) / "Qwen3.6-27B")), {})
    lines = {}
    for fleet_host in ("ct129", "b200"):
        plan = sglang_plan(plan_settings(fleet_host), host_facts(fleet_host, model), TABLE)
        assert plan["problems"] == []
        lines.update({f"{fleet_host}/{i['name']}": i["argv"] for i in plan["instances"]})
    return lines


# What the role's _sglang_venv_args_parser gives the checker for SGLang (roles/sglang_venv/vars/main.yml).
SGLANG_PARSER = "sglang.srt.server_args:prepare_server_args sglang.srt.plugins:load_plugins"


def check(host: Any, command_lines: dict[str, list[str]]) -> dict[str, Any]:
    output = host.check_output(f"echo {shlex.quote(json.dumps(command_lines))} | {VENV}/bin/python {VENV}/check_server_args.py {SGLANG_PARSER}")
    verdicts: dict[str, Any] = json.loads(output.splitlines()[-1])
    return verdicts


def test_the_venv_imports_the_pinned_sglang_and_the_gateway(host: Any) -> None:
    """SGLang and the SGLang Model Gateway (smg, which replaced sglang-router) at the versions the role pins."""
    assert host.check_output(f"{VENV}/bin/python -c 'import sglang; print(sglang.__version__)'").strip() == "0.5.23"
    installed = host.check_output(f"{VENV}/bin/python -m pip list --format=freeze").splitlines()
    assert "smg==1.13.0" in installed
    assert not [line for line in installed if line.lower().replace("_", "-").startswith("sglang-router==")]
    assert host.check_output(f"{VENV}/bin/python -c 'import smg.launch_router; print(1)'").strip() == "1"


def test_production_command_lines_parse_with_sglangs_own_parser(host: Any) -> None:
    lines = production_command_lines()
    assert len(lines) == 8
    verdicts = check(host, lines)
    assert {name: verdict["rc"] for name, verdict in verdicts.items()} == dict.fromkeys(lines, 0), verdicts


def test_a_removed_flag_is_refused_naming_its_replacement(host: Any) -> None:
    argv = production_command_lines()["b200/sglang-30000"]
    verdict = check(host, {"old": [*argv, "--cuda-graph-max-bs", "512"]})["old"]
    assert verdict["rc"] == 2
    assert "--cuda-graph-max-bs-decode" in verdict["error"].splitlines()[-1]


def test_cuda_nvcc_runs(host: Any) -> None:
    result = host.run("/usr/local/cuda/bin/nvcc --version")
    assert result.rc == 0 and "release 13.0" in result.stdout


def test_the_install_wrote_what_preflight_counts_on(host: Any) -> None:
    """Preflight refuses an install the host has no room for, from the footprint measured once
    (roles/sglang_venv/vars/main.yml): this install's venv, wheelhouse archive and unpacked wheels are within 10% of it."""
    import yaml

    footprint = yaml.safe_load((ROOT / "roles/sglang_venv/vars/main.yml").read_text())["_sglang_venv_footprints"]["sglang"]["0.5.23"]
    wheelhouse = "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23"
    written = {
        "venv": int(host.check_output(f"du -sb {VENV}").split()[0]),
        "archive": int(host.check_output(f"stat -c %s {wheelhouse}.tar")),
        "wheels": int(host.check_output(f"du -sb {wheelhouse}").split()[0]),
    }
    expected = {"venv": footprint["venv_bytes"], "archive": footprint["wheels_bytes"], "wheels": footprint["wheels_bytes"]}
    for name, size in written.items():
        assert 0.9 * expected[name] <= size <= 1.1 * expected[name], (name, size, expected[name])
