"""Safe rollouts on the sandbox: a failed or unverified restart is rolled back; systemd restarts a killed server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from fleet import (
    STANDIN_PYTHON,
    Run,
    file_digests,
    http_status,
    on_host,
    overlay_inventory,
    run_playbook,
    unit_property,
    unit_starts,
    wait_until,
)


def deploy_with_overrides(tmp_path: Path, overrides: dict[int, dict[str, Any]], **host_vars: Any) -> Run:
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_instance_overrides": overrides, **host_vars}})
    return run_playbook("deploy.yml", inventory=inventory, limit="b200")


def assert_rolled_back(result: Run, port: int, knob: str, *reasons: str) -> str:
    """The rollout stopped at sglang-<port> for these reasons, and the instance serves its inventory's files again."""
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert f"Rollout stopped at sglang-{port}" in report
    for reason in reasons:
        assert reason in report
    assert "the previous configuration is serving again" in report
    assert knob not in on_host("b200", "cat", f"/etc/sglang-fleet/sglang-{port}.env")
    assert http_status("b200", f"http://127.0.0.1:{port}/health_generate") == 200
    return report


def test_a_crashing_config_is_rolled_back_and_the_old_server_answers(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    result = deploy_with_overrides(
        tmp_path, {4: {"environment": {"SGLANG_SIM_FAIL_AT_START": "CUDA error: out of memory (rehearsal)"}}}
    )
    report = assert_rolled_back(result, 30004, "SGLANG_SIM_FAIL_AT_START", "process was killed by signal 9 (SIGKILL)")
    assert "CUDA error: out of memory (rehearsal)" in report, "the journal tail of the failed start"
    after = unit_starts("b200")
    assert [unit for unit in before if before[unit] != after[unit]] == ["sglang-30004.service"]
    assert run_playbook("deploy.yml", limit="b200").changed() == [], "the restored files are the inventory's"


def test_speculative_decoding_that_silently_does_not_engage_is_rolled_back(sandbox: Run, tmp_path: Path) -> None:
    result = deploy_with_overrides(tmp_path, {2: {"environment": {"SGLANG_SIM_IGNORE_SPECULATIVE": "1"}}})
    assert_rolled_back(
        result, 30002, "SGLANG_SIM_IGNORE_SPECULATIVE", "/server_info reports speculative_algorithm=None, expected 'EAGLE'"
    )


def test_a_server_that_never_becomes_ready_is_rolled_back(sandbox: Run, tmp_path: Path) -> None:
    result = deploy_with_overrides(
        tmp_path, {3: {"environment": {"SGLANG_SIM_HANG_LOADING": "1"}}}, sglang_server_ready_timeout=8
    )
    assert_rolled_back(result, 30003, "SGLANG_SIM_HANG_LOADING", "not ready after 8 s")


def test_a_start_waits_while_another_process_holds_the_gpus_and_names_it(sandbox: Run) -> None:
    unit, since = "sglang-30006.service", on_host("b200", "date", "+%Y-%m-%d %H:%M:%S").strip()
    on_host("b200", "systemctl", "stop", unit)
    hog = [STANDIN_PYTHON, "-m", "sglang_simulator.gpu_hog", "--gpus", "6", "--mib", "2048"]
    subprocess.run(["docker", "exec", "--detach", "b200", *hog], check=True)
    try:
        find = ["docker", "exec", "b200", "pgrep", "-f", "gpu_hog --gpus 6"]
        assert wait_until(lambda: bool(subprocess.run(find, capture_output=True, text=True).stdout.strip()), 10)
        pid = on_host("b200", "pgrep", "-f", "gpu_hog --gpus 6").split()[0]
        on_host("b200", "systemctl", "start", "--no-block", unit)

        def journal() -> str:
            return on_host("b200", "journalctl", "--no-pager", "-u", unit, "--since", since)

        assert wait_until(lambda: "are not free; not starting" in journal(), 60), journal()
        assert re.search(rf"GPU 6 \(GPU-[0-9a-f-]+\): 2048 MiB held by PID {pid} \(", journal()), journal()
        assert "sglang_simulator.gpu_hog --gpus 6" in journal()
        assert http_status("b200", "http://127.0.0.1:30006/health_generate") == 0, "the server did not start"
    finally:
        on_host("b200", "pkill", "-f", "gpu_hog --gpus 6")
    on_host("b200", "systemctl", "restart", unit)
    assert wait_until(lambda: http_status("b200", "http://127.0.0.1:30006/health_generate") == 200, 60)


def test_a_rollout_stops_at_the_first_failure_and_leaves_later_instances_alone(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    files = file_digests("b200", "/etc/systemd/system/sglang-30005.service /etc/sglang-fleet/sglang-30005.env")
    failing = {"environment": {"SGLANG_SIM_FAIL_AT_START": "rehearsal"}}
    later = {"server_args": {"max-running-requests": 128}}
    result = deploy_with_overrides(tmp_path, {1: failing, 5: later})
    assert result.rc != 0
    assert "Not attempted: sglang-30005" in "\n".join(result.failure_messages())
    assert unit_starts("b200")["sglang-30005.service"] == before["sglang-30005.service"]
    assert file_digests("b200", "/etc/systemd/system/sglang-30005.service /etc/sglang-fleet/sglang-30005.env") == files, (
        "an instance the rollout did not reach keeps its verified files on disk, so a crash cannot restart it into new ones"
    )
    restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()


def test_systemd_restarts_a_killed_server_and_readiness_returns(sandbox: Run) -> None:
    unit = "sglang-30006.service"
    restarts = int(unit_property("b200", unit, "NRestarts"))
    on_host("b200", "kill", "-9", unit_property("b200", unit, "MainPID"))
    wait_until(
        lambda: (
            int(unit_property("b200", unit, "NRestarts")) > restarts
            and http_status("b200", "http://127.0.0.1:30006/health_generate") == 200
        ),
        90,
    )
    assert int(unit_property("b200", unit, "NRestarts")) == restarts + 1
    assert http_status("b200", "http://127.0.0.1:30006/health_generate") == 200


def test_a_canary_whose_accept_length_drops_is_rolled_back_and_the_rollout_stops_with_the_others_untouched(
    sandbox: Run, tmp_path: Path
) -> None:
    """b200's seven instances of one model, all changed, a budget of 3 and a canary: the canary (sglang-30000) rolls
    alone, verified (its accept length 1.5 is above the minimum 1.0), then watched against the six not yet rolled
    (the simulator's default 2.8 for EAGLE with 3 steps): more than 20% below, it is rolled back and nothing else rolls."""
    before = unit_starts("b200")
    others = " ".join(
        f"/etc/systemd/system/sglang-{port}.service /etc/sglang-fleet/sglang-{port}.env" for port in range(30001, 30007)
    )
    files = file_digests("b200", others)
    changed: dict[str, Any] = {"server_args": {"max-running-requests": 256}}
    overrides: dict[int, dict[str, Any]] = {
        0: {"environment": {"SGLANG_SIM_ACCEPT_LENGTH": "1.5"}},
        **{index: changed for index in range(1, 7)},
    }
    result = deploy_with_overrides(tmp_path, overrides, sglang_rollout_max_unavailable=3, sglang_rollout_canary_seconds=4)
    report = "\n".join(result.failure_messages())
    rolled = [
        (data["task"], data.get("res", {}).get("msg") or data.get("res", {}).get("restarted"))
        for kind in ("runner_on_ok", "runner_on_failed")
        for data in result.results(kind)
        if "wave" in data["task"]
    ]
    assert result.rc != 0, rolled
    [waves] = [data["res"]["msg"] for data in result.results() if data["task"] == "Say what rolls, in which waves"]
    assert [line.split(": ", 2)[::2] for line in waves] == [
        ["wave 1/3", "b200/sglang-30000"],
        ["wave 2/3", "b200/sglang-30001, b200/sglang-30002, b200/sglang-30003"],
        ["wave 3/3", "b200/sglang-30004, b200/sglang-30005, b200/sglang-30006"],
    ]
    assert "Rollout stopped at sglang-30000" in report
    assert "the canary regressed over 4 s against 6 peer(s)" in report
    # The simulator's accept lengths are averages of what it generated: about 1.5 and 2.8.
    assert re.search(r"avg_spec_accept_length 1\.[45]\d is more than 20% below the peers' 2\.[78]\d", report), report
    assert "the previous configuration is serving again" in report
    assert "SGLANG_SIM_ACCEPT_LENGTH" not in on_host("b200", "cat", "/etc/sglang-fleet/sglang-30000.env")
    assert http_status("b200", "http://127.0.0.1:30000/health_generate") == 200
    after = unit_starts("b200")
    assert [unit for unit in before if before[unit] != after[unit]] == ["sglang-30000.service"]
    assert file_digests("b200", others) == files, "the later waves keep their verified files"
    # As after any stopped rollout: the instances not attempted had their verified files written back (newer than
    # their processes), so the next deploy restarts them once, into the inventory's files.
    restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
