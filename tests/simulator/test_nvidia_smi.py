"""The nvidia-smi stand-in and the GPU-hog helper."""

from __future__ import annotations

import signal
import subprocess
import sys

from sglang_simulator.gpus import Inventory, load_inventory, visible_gpus

from .simkit import Env, run_sim


def smi(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sim("sglang_simulator.nvidia_smi", list(args), env.environ())


def test_query_gpu_formats(sim_env: Env) -> None:
    fields = "index,name,uuid,memory.total,memory.used,memory.free,driver_version,pci.bus_id,count"
    out = smi(sim_env, f"--query-gpu={fields}", "--format=csv")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
        "driver_version, pci.bus_id, count"
    )
    assert lines[1].startswith("0, NVIDIA B200, GPU-5e1a0000-0000-4000-8000-000000000000, 183359 MiB, 0 MiB")
    assert lines[1].endswith(", 580.95.05, 00000000:18:00.0, 2")
    bare = smi(sim_env, "--query-gpu=memory.total", "--format=csv,noheader,nounits")
    assert bare.stdout.splitlines() == ["183359", "183359"]
    one = smi(sim_env, "-i", "1", "--query-gpu", "index,uuid", "--format", "csv,noheader")
    assert one.stdout.splitlines() == ["1, GPU-5e1a0000-0000-4000-8000-000000000001"]


def test_list_table_and_errors(sim_env: Env) -> None:
    listed = smi(sim_env, "-L").stdout.splitlines()
    assert listed[0] == "GPU 0: NVIDIA B200 (UUID: GPU-5e1a0000-0000-4000-8000-000000000000)"
    table = smi(sim_env).stdout
    assert "Driver Version: 580.95.05" in table and "No running processes found" in table
    bad = smi(sim_env, "--bogus")
    assert bad.returncode == 2 and "Invalid combination of input arguments" in bad.stdout
    field = smi(sim_env, "--query-gpu=temperature.bogus", "--format=csv")
    assert (
        field.returncode == 2 and 'Field "temperature.bogus" is not a valid field to query.' in field.stdout
    )
    missing = run_sim("sglang_simulator.nvidia_smi", [], sim_env.environ(SGLANG_SIM_GPUS_FILE="/nonexistent"))
    assert missing.returncode == 9 and "couldn't communicate with the NVIDIA driver" in missing.stdout


def test_gpu_hog_shows_in_compute_apps(sim_env: Env) -> None:
    hog = subprocess.Popen(
        [sys.executable, "-m", "sglang_simulator.gpu_hog", "--gpus", "1", "--mib", "4096"],
        env=sim_env.environ(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert hog.stderr is not None and "holds 4096 MiB" in hog.stderr.readline()
        apps = smi(sim_env, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv")
        assert apps.stdout.splitlines() == [
            "pid, gpu_uuid, used_gpu_memory [MiB], process_name",
            f"{hog.pid}, GPU-5e1a0000-0000-4000-8000-000000000001, 4096 MiB, python3",
        ]
        used = smi(sim_env, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
        assert used.stdout.splitlines() == ["0", "4096"]
    finally:
        hog.send_signal(signal.SIGKILL)  # an orphan that dies hard leaves a stale record
        hog.wait()
    assert (sim_env.state_dir / f"gpu-{hog.pid}.json").exists()
    apps = smi(sim_env, "--query-compute-apps=pid,used_memory", "--format=csv,noheader")
    assert apps.stdout == ""  # dead pids are ignored


def test_visible_gpus_follow_cuda_rules(sim_env: Env) -> None:
    inventory: Inventory = load_inventory(sim_env.gpus_file)
    assert [g.index for g in visible_gpus(inventory, None)] == [0, 1]
    assert [g.index for g in visible_gpus(inventory, "1")] == [1]
    assert [g.index for g in visible_gpus(inventory, "0,9,1")] == [0]
    assert visible_gpus(inventory, "GPU-5e1a0000-0000-4000-8000-000000000001")[0].index == 1
