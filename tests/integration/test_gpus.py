"""GPUs by UUID under each unit's device policy, the CUDA smoke check in preflight, and the NVIDIA device nodes."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from fleet import Run, file_digests, on_host, overlay_inventory, run_playbook, unit_starts

SIMULATOR_PYTHON = "/opt/sglang/simulator-0.5.23/bin/python"


def uuids_by_index(host: str) -> dict[int, str]:
    rows = on_host(host, "nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader").splitlines()
    return {int(index): uuid.strip() for index, uuid in (row.split(",") for row in rows)}


def environment_file(host: str, name: str) -> dict[str, str]:
    text = on_host(host, "cat", f"/etc/sglang-fleet/{name}.env")
    return dict(shlex.split(line)[0].split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def unit_sandbox(host: str, unit: str) -> list[str]:
    """The confinement lines of a deployed unit (what preflight's smoke check runs under too)."""
    lines = on_host(host, "cat", f"/etc/systemd/system/{unit}").split("# Account, limits", 1)[1].split("[Install]")[0]
    return [line for line in lines.splitlines()[2:] if line and not line.startswith("#")]


def run_in_sandbox(host: str, unit: str, environment: dict[str, str], *command: str) -> tuple[int, str]:
    properties = [f"--property={line}" for line in unit_sandbox(host, unit)]
    settings = [f"--setenv={name}={value}" for name, value in environment.items()]
    argv = ["docker", "exec", host, "systemd-run", "--wait", "--pipe", "--quiet", "--collect", *properties, *settings, *command]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def test_each_b200_instance_sees_exactly_its_own_gpu_by_uuid(sandbox: Run) -> None:
    uuids = uuids_by_index("b200")
    apps = on_host("b200", "nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits")
    held: dict[int, list[str]] = {}
    for row in apps.splitlines():
        pid, uuid = (cell.strip() for cell in row.split(","))
        held.setdefault(int(pid), []).append(uuid)
    for index in range(7):
        name = f"sglang-{30000 + index}"
        assert environment_file("b200", name)["CUDA_VISIBLE_DEVICES"] == uuids[index]
        main_pid = int(on_host("b200", "systemctl", "show", "--property=MainPID", "--value", f"{name}.service"))
        assert held[main_pid] == [uuids[index]], f"{name} holds memory on its own GPU only"
        allowed = [line for line in unit_sandbox("b200", f"{name}.service") if line.startswith("DeviceAllow=/dev/nvidia")]
        minor = 6 - index  # the sandbox's b200 numbers its device minors backwards
        assert f"DeviceAllow=/dev/nvidia{minor} rw" in allowed
        assert [line for line in allowed if line[23:24].isdigit()] == [f"DeviceAllow=/dev/nvidia{minor} rw"]


def test_a_host_wide_index_in_the_units_sandbox_fails_at_start(sandbox: Run) -> None:
    """What the old rendering did: CUDA_VISIBLE_DEVICES=3 inside a cgroup that allows only GPU 3's node names no GPU."""
    unit = "sglang-30003.service"
    argv = shlex.split(
        on_host("b200", "systemctl", "show", "--property=ExecStart", "--value", unit).split("argv[]=", 1)[1].split(" ;")[0]
    )
    argv = [word if word != "30003" else "39003" for word in argv]
    argv[argv.index("--nccl-port") + 1] = "39103"
    code, output = run_in_sandbox("b200", unit, {"CUDA_VISIBLE_DEVICES": "3"}, *argv)
    assert code != 0 and "RuntimeError: No CUDA GPUs are available" in output, output
    uuid = uuids_by_index("b200")[3]
    code, output = run_in_sandbox(
        "b200", unit, {"CUDA_VISIBLE_DEVICES": uuid}, SIMULATOR_PYTHON, "-m", "sglang_simulator.cuda_check", "--expect", "1"
    )
    assert code == 0 and json.loads(output.strip().splitlines()[-1])["devices"][0]["uuid"] == uuid, output


def test_preflight_refuses_a_deploy_whose_instance_cannot_reach_its_gpu(sandbox: Run, tmp_path: Path) -> None:
    """GPU 3's device node is gone: the smoke check of the instance this deploy would restart fails, nothing changes."""
    node = "/dev/nvidia3"  # GPU 3's minor on the sandbox's b200
    before, files = unit_starts("b200"), file_digests("b200")
    on_host("b200", "rm", node)
    try:
        inventory = overlay_inventory(
            tmp_path, host_vars={"b200": {"sglang_instance_overrides": {3: {"server_args": {"max-running-requests": 256}}}}}
        )
        refused = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    finally:
        on_host("b200", "nvidia-modprobe", "-c=3")
    messages = "\n".join(refused.failure_messages())
    assert refused.rc != 0
    assert "b200 instance sglang-30003: sglang_gpu_ids=[3]: CUDA smoke check in the unit's sandbox failed: " in messages
    assert "CUDA sees 0 GPU(s), expected 1" in messages
    assert "sglang-30002" not in messages and "sglang-30004" not in messages
    assert unit_starts("b200") == before and file_digests("b200") == files


def test_preflight_fails_the_host_whose_runtime_lacks_the_checks_script(sandbox: Run, tmp_path: Path) -> None:
    """The check's script removed from b200's runtime: the check cannot run, so the instance it would check fails."""
    package = on_host(
        "b200", SIMULATOR_PYTHON, "-c", "import os, sglang_simulator; print(os.path.dirname(sglang_simulator.__file__))"
    ).strip()
    script = f"{package}/cuda_check.py"
    before, files = unit_starts("b200"), file_digests("b200")
    on_host("b200", "mv", script, f"{script}.removed")
    try:
        inventory = overlay_inventory(
            tmp_path, host_vars={"b200": {"sglang_instance_overrides": {3: {"server_args": {"max-running-requests": 256}}}}}
        )
        refused = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    finally:
        on_host("b200", "mv", f"{script}.removed", script)
    messages = "\n".join(refused.failure_messages())
    assert refused.rc != 0
    assert (
        "b200 instance sglang-30003: sglang_gpu_ids=[3]: CUDA smoke check in the unit's sandbox failed: "
        "the check's script is missing (" in messages
    ), messages
    assert "No module named sglang_simulator.cuda_check" in messages
    assert unit_starts("b200") == before and file_digests("b200") == files


def test_the_device_nodes_unit_creates_the_uvm_node_every_instance_needs(sandbox: Run, tmp_path: Path) -> None:
    for dependency in ("Wants", "After"):
        assert "sglang-nvidia-devices.service" in on_host(
            "b200", "systemctl", "show", f"--property={dependency}", "--value", "sglang-30000"
        )
    on_host("b200", "rm", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    try:
        inventory = overlay_inventory(
            tmp_path, host_vars={"b200": {"sglang_server_nvidia_modprobe": "/usr/bin/no-such-modprobe"}}
        )
        refused = run_playbook("deploy.yml", inventory=inventory, limit="b200", tags="preflight")
        assert refused.rc != 0
        assert 'b200 host: sglang_server_nvidia_modprobe="/usr/bin/no-such-modprobe": /dev/nvidia-uvm is missing' in "\n".join(
            refused.failure_messages()
        )
    finally:
        on_host("b200", "systemctl", "restart", "sglang-nvidia-devices.service")
    assert on_host("b200", "stat", "--format=%F %t:%T", "/dev/nvidia-uvm").strip() == "character special file 1ff:0"
