"""Safe rollouts on the sandbox: a failed or unverified restart is rolled back; systemd restarts a killed server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fleet import Run, http_status, on_host, overlay_inventory, run_playbook, unit_property, unit_starts


def deploy_with_overrides(tmp_path: Path, overrides: dict[int, dict[str, Any]]) -> Run:
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_instance_overrides": overrides}})
    return run_playbook("deploy.yml", inventory=inventory, limit="b200")


def test_a_crashing_config_is_rolled_back_and_the_old_server_answers(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    result = deploy_with_overrides(
        tmp_path, {4: {"environment": {"SGLANG_SIM_FAIL_AT_START": "CUDA error: out of memory (rehearsal)"}}}
    )
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert "Rollout stopped at sglang-30004" in report
    assert "process exited with status 1" in report
    assert "the previous configuration is serving again" in report
    assert "CUDA error: out of memory (rehearsal)" in report, "the journal tail of the failed start"
    assert http_status("b200", "http://127.0.0.1:30004/health_generate") == 200
    assert "SGLANG_SIM_FAIL_AT_START" not in on_host("b200", "cat", "/etc/sglang-fleet/sglang-30004.env")
    after = unit_starts("b200")
    assert [unit for unit in before if before[unit] != after[unit]] == ["sglang-30004.service"]
    assert run_playbook("deploy.yml", limit="b200").changed() == [], "the restored files are the inventory's"


def test_speculative_decoding_that_silently_does_not_engage_is_rolled_back(sandbox: Run, tmp_path: Path) -> None:
    result = deploy_with_overrides(tmp_path, {2: {"environment": {"SGLANG_SIM_IGNORE_SPECULATIVE": "1"}}})
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert "Rollout stopped at sglang-30002" in report
    assert "/server_info reports speculative_algorithm=None, expected 'EAGLE'" in report
    assert "the previous configuration is serving again" in report
    assert "SGLANG_SIM_IGNORE_SPECULATIVE" not in on_host("b200", "cat", "/etc/sglang-fleet/sglang-30002.env")
    assert http_status("b200", "http://127.0.0.1:30002/health_generate") == 200


def test_a_rollout_stops_at_the_first_failure_and_leaves_later_instances_alone(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    failing = {"environment": {"SGLANG_SIM_FAIL_AT_START": "rehearsal"}}
    later = {"server_args": {"max-running-requests": 128}}
    result = deploy_with_overrides(tmp_path, {1: failing, 5: later})
    assert result.rc != 0
    assert "Not attempted: sglang-30005" in "\n".join(result.failure_messages())
    assert unit_starts("b200")["sglang-30005.service"] == before["sglang-30005.service"]
    restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()


def test_systemd_restarts_a_killed_server_and_readiness_returns(sandbox: Run) -> None:
    unit = "sglang-30006.service"
    restarts = int(unit_property("b200", unit, "NRestarts"))
    on_host("b200", "kill", "-9", unit_property("b200", unit, "MainPID"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if (
            int(unit_property("b200", unit, "NRestarts")) > restarts
            and http_status("b200", "http://127.0.0.1:30006/health_generate") == 200
        ):
            break
        time.sleep(1)
    assert int(unit_property("b200", unit, "NRestarts")) == restarts + 1
    assert http_status("b200", "http://127.0.0.1:30006/health_generate") == 200
