"""sglang_cuda_check: each instance's smoke check runs under its unit's own settings; failures are problem lines."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_server_unit_properties
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
    ("output", "ok"),
    [
        ("/opt/sglang/sglang-0.5.23/bin/python: can't open file '/opt/sglang/sglang-0.5.23/cuda_smoke_check.py'", True),
        ("Failed to start transient service unit: Unit sglang-cuda-check.service has a bad unit file setting.", False),
    ],
)
def test_a_runtime_without_the_check_is_skipped_but_a_failing_start_is_a_problem(output: str, ok: bool) -> None:
    assert sglang_cuda_check.verdict(output, 1)["ok"] is ok


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
        "b200", [instance], [[]], {}, ["py"], 1, lambda argv, **_: Hanging(argv, "", 0), str(tmp_path)
    )
    assert "no answer within 1 s" in result["problems"][0]
