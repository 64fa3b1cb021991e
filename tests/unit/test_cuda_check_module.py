"""sglang_cuda_check: each instance's smoke check runs under its unit's own settings; failures are problem lines."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_server_unit_properties
from ansible_collections.sglang.fleet.plugins.module_utils import sandboxed
from ansible_collections.sglang.fleet.plugins.modules import sglang_cuda_check

Plan = Callable[..., dict[str, Any]]


class FakeProcess:
    def __init__(self, argv: list[str], output: str, returncode: int) -> None:
        self.argv, self.output, self.returncode = argv, output, returncode
        env_file = next(
            item.removeprefix("--property=EnvironmentFile=") for item in argv if item.startswith("--property=EnvironmentFile=")
        )
        self.environment = Path(env_file).read_text()
        self.mode = os.stat(env_file).st_mode & 0o777

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        return self.output, None


def test_each_instance_runs_under_its_units_properties_and_environment(plan: Plan, tmp_path: Path) -> None:
    instances = plan("b200")["instances"][:2]
    sandbox = ["User=sglang", "DevicePolicy=closed", "ProtectSystem=strict"]
    spawned: list[FakeProcess] = []

    def spawn(argv: list[str], **_: Any) -> FakeProcess:
        ok = "GPU-b200-0" in FakeProcess(argv, "", 0).environment
        process = FakeProcess(
            argv, '{"ok": true}' if ok else 'noise\n{"ok": false, "error": "CUDA sees 0 GPU(s), expected 1"}', 0 if ok else 1
        )
        spawned.append(process)
        return process

    properties = [sglang_server_unit_properties(instance, sandbox) for instance in instances]
    result = sglang_cuda_check.run_checks(
        "b200", instances, properties, {"HOME": "/var/lib/sglang"}, ["py", "check.py"], 60, spawn, str(tmp_path)
    )
    first = spawned[0].argv
    assert first[:4] == ["systemd-run", "--wait", "--pipe", "--quiet"]
    assert [a for a in first if a.startswith("--property=")][:-1] == [f"--property={p}" for p in properties[0]]
    assert "--property=DeviceAllow=/dev/nvidia0 rw" in first and "--property=DeviceAllow=/dev/nvidia1 rw" not in first
    assert first[first.index("--") + 1 :] == ["py", "check.py", "--expect", "1"]
    assert 'CUDA_VISIBLE_DEVICES="GPU-b200-0"' in spawned[0].environment and 'HOME="/var/lib/sglang"' in spawned[0].environment
    assert spawned[0].mode == 0o600
    assert result["problems"] == [
        "b200 instance sglang-30001: sglang_gpu_ids=[1]: CUDA smoke check in the unit's sandbox failed: "
        f"CUDA sees 0 GPU(s), expected 1; fix: {sglang_cuda_check.FIX}"
    ]
    assert list(tmp_path.iterdir()) == [], "the environment files are removed"


def test_tensor_parallel_instances_also_all_reduce(plan: Plan, tmp_path: Path) -> None:
    instance = plan("ct129")["instances"][0]
    argv: list[str] = []

    def spawn(command: list[str], **_: Any) -> FakeProcess:
        argv.extend(command)
        return FakeProcess(command, '{"ok": true, "all_reduce": true}', 0)

    sglang_cuda_check.run_checks("ct129", [instance], [["User=sglang"]], {}, ["py", "check.py"], 60, spawn, str(tmp_path))
    assert argv[argv.index("--") + 1 :] == ["py", "check.py", "--expect", "2", "--all-reduce"]


@pytest.mark.parametrize(
    "output",
    [
        "Failed to start transient service unit: Unit sglang-cuda-check.service has a bad unit file setting.",
        "",
    ],
)
def test_a_check_that_did_not_run_is_a_problem(output: str) -> None:
    result = sglang_cuda_check.verdict(output, 1)
    assert result["ok"] is False
    assert result["error"] == f"the check did not run: {output or 'exit status 1'}"


@pytest.mark.parametrize(
    "output",
    [
        "/opt/sglang/sglang-0.5.23/bin/python: can't open file '/opt/sglang/sglang-0.5.23/cuda_smoke_check.py': "
        "[Errno 2] No such file or directory",
        "/opt/sglang/simulator-0.5.23/bin/python: No module named sglang_simulator.cuda_check",
    ],
)
def test_a_missing_script_fails_that_hosts_preflight_naming_the_instance(plan: Plan, tmp_path: Path, output: str) -> None:
    """No runtime of any sglang-fleet release lacks the check: a missing script is an incomplete runtime, not a pass."""
    instance = plan("b200")["instances"][2]
    result = sglang_cuda_check.run_checks(
        "b200",
        [instance],
        [["User=sglang"]],
        {},
        ["py", "check.py"],
        60,
        lambda argv, **_: FakeProcess(argv, output, 1),
        str(tmp_path),
    )
    assert result["checked"][instance["name"]]["ok"] is False
    assert result["problems"] == [
        f"b200 instance sglang-30002: sglang_gpu_ids=[2]: CUDA smoke check in the unit's sandbox failed: "
        f"the check's script is missing ({output}); fix: {sglang_cuda_check.FIX_MISSING}"
    ]


def test_a_check_that_hangs_is_a_problem(plan: Plan, tmp_path: Path) -> None:
    class Hanging(FakeProcess):
        killed = False

        def communicate(self, timeout: float | None = None) -> tuple[str, None]:
            if timeout is not None and not self.killed:
                raise subprocess.TimeoutExpired("systemd-run", timeout)
            return "", None

        def kill(self) -> None:
            self.killed = True

    instance = plan("b200")["instances"][0]
    result = sglang_cuda_check.run_checks(
        "b200", [instance], [["User=sglang"]], {}, ["py"], 1, lambda argv, **_: Hanging(argv, "", 0), str(tmp_path)
    )
    assert "no answer within 1 s" in result["problems"][0]


@pytest.mark.parametrize("properties", [[], ["DevicePolicy=closed"], ["User=root"], ["User=sglang", "User=0"]])
def test_no_check_runs_the_runtime_s_code_as_root(plan: Plan, tmp_path: Path, properties: list[str]) -> None:
    """A transient unit without User= runs as root: the model's and the runtime's code never does."""
    instance = plan("b200")["instances"][0]
    spawned: list[list[str]] = []
    with pytest.raises(sandboxed.RunsAsRoot):
        sglang_cuda_check.run_checks(
            "b200", [instance], [properties], {}, ["py"], 1, lambda argv, **_: spawned.append(argv), str(tmp_path)
        )
    assert spawned == []
    assert list(tmp_path.iterdir()) == [], "no environment file written"
