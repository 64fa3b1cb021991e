"""Reshaping a host: b200 from seven 1-GPU instances to three 2-GPU instances and back.

The fleet's own running instances hold the GPUs the new shape needs; preflight must not call them foreign, the
instances the new shape displaces stop (drained) before anything restarts, `--check` states it, and the host serves
in its new shape afterwards, each instance in its router again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet import Run, file_digests, http_status, on_host, overlay_inventory, router_worker_urls, run_playbook

PORTS = range(30000, 30007)


def task_results(result: Run, task: str) -> list[dict[str, Any]]:
    return [data["res"] for data in result.results() if data["host"] == "b200" and data["task"] == task]


def preflight_report(result: Run) -> str:
    return " ".join(str(res.get("msg", "")) for res in task_results(result, "Say what this deploy changes on each host"))


def serving(ports: list[int]) -> dict[int, int]:
    return {port: http_status("b200", f"http://127.0.0.1:{port}/health_generate") for port in ports}


def planned_units() -> list[str]:
    listing = on_host("b200", "sh", "-c", "ls /etc/systemd/system | grep -E '^sglang-[0-9]+[.]service$' || true")
    return sorted(listing.split())


def visible_devices(port: int) -> str:
    lines = on_host("b200", "cat", f"/etc/sglang-fleet/sglang-{port}.env").splitlines()
    return next(line for line in lines if line.startswith("CUDA_VISIBLE_DEVICES=")).split("=", 1)[1]


def test_a_reshape_stops_the_displaced_instances_first_and_check_mode_states_it(sandbox: Run, tmp_path: Path) -> None:
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_gpus_per_instance": 2, "sglang_tensor_parallel_size": 2}})
    before = file_digests("b200")

    checked = run_playbook("deploy.yml", inventory=inventory, limit="b200", cmdline="--check")
    assert checked.rc == 0, checked.failure_messages()
    report = preflight_report(checked)
    assert "reshape from 7 running instance(s) to 3" in report, report
    assert "sglang-30001.service stops first (GPU(s) [1] go to sglang-30000.service)" in report, report
    assert "Serving while they are down: 1 of 7 (sglang-30000.service" in report, report
    [would] = task_results(checked, "Stop the instances the new shape displaces, before any instance restarts")
    assert would["would_stop"] == ["sglang-30001", "sglang-30002"]
    assert file_digests("b200") == before, "--check changed a file"

    try:
        reshaped = run_playbook("deploy.yml", inventory=inventory, limit="b200")
        assert reshaped.rc == 0, reshaped.failure_messages()
        [stopped] = task_results(reshaped, "Stop the instances the new shape displaces, before any instance restarts")
        assert stopped["stopped"] == ["sglang-30001", "sglang-30002"]
        assert planned_units() == ["sglang-30000.service", "sglang-30001.service", "sglang-30002.service"]
        assert serving([30000, 30001, 30002]) == {30000: 200, 30001: 200, 30002: 200}
        assert all(len(visible_devices(port).split(",")) == 2 for port in (30000, 30001, 30002))
        # The displaced instances stopped drained from b200's router and start again at the same URLs: back in it.
        assert router_worker_urls(healthy=True) == [f"http://127.0.0.1:{port}" for port in (30000, 30001, 30002)]
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
    assert "reshape from 3 running instance(s) to 7" in preflight_report(restored)
    assert planned_units() == [f"sglang-{port}.service" for port in PORTS]
    assert set(serving(list(PORTS)).values()) == {200}
    assert router_worker_urls(healthy=True) == [f"http://127.0.0.1:{port}" for port in PORTS]


def test_a_reshape_that_keeps_every_url_puts_the_displaced_instances_back_in_the_router(sandbox: Run, tmp_path: Path) -> None:
    """GPUs 0 and 1 swap instances: sglang-30000 and sglang-30001 stop drained from b200's router and start again at
    the same URLs, so the router's planned workers are the same as before. The run registers them again."""
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_gpu_ids": [1, 0, 2, 3, 4, 5, 6]}})
    everyone = [f"http://127.0.0.1:{port}" for port in PORTS]
    gpu0, gpu1 = visible_devices(30000), visible_devices(30001)
    try:
        swapped = run_playbook("deploy.yml", inventory=inventory, limit="b200")
        assert swapped.rc == 0, swapped.failure_messages()
        [stopped] = task_results(swapped, "Stop the instances the new shape displaces, before any instance restarts")
        assert stopped["stopped"] == ["sglang-30000", "sglang-30001"]
        assert (visible_devices(30000), visible_devices(30001)) == (gpu1, gpu0)
        assert router_worker_urls(healthy=True) == everyone
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
    assert (visible_devices(30000), visible_devices(30001)) == (gpu0, gpu1)
    assert router_worker_urls(healthy=True) == everyone
