"""ExecStartPre of every SGLang unit: refuse to start while another process holds memory on our GPUs.

An orphaned scheduler of an earlier run, or any other program, keeps GPU memory and makes SGLang fail
minutes later. This takes the instance's GPUs (UUIDs) from --gpus, asks nvidia-smi which compute
processes use them, waits up to --wait seconds for exiting processes to free their memory, and otherwise
exits 1 naming each PID with its systemd unit and command line. Installed by sglang-fleet; the unit runs it as
root with an empty environment (`env -i`) and `python -I`, so nothing the service account controls steers it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def query(nvidia_smi: str, what: str) -> list[list[str]]:
    output = subprocess.run(
        [nvidia_smi, what, "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in output.splitlines() if line.strip()]


def describe(pid: str) -> str:
    unit, command = "no unit", "?"
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            units = [part for line in handle for part in line.strip().split("/") if part.endswith(".service")]
        unit = units[-1] if units else unit
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        pass
    return f"PID {pid} ({unit}: {command})"


def foreign_processes(nvidia_smi: str, visible: list[str]) -> list[str]:
    """Processes holding memory on the GPUs named in `visible` (UUIDs, as sglang-fleet writes them, or indexes)."""
    indexes = {uuid: index for index, uuid in query(nvidia_smi, "--query-gpu=index,uuid")}
    found = []
    for pid, uuid, used in (row[:3] for row in query(nvidia_smi, "--query-compute-apps=pid,gpu_uuid,used_memory")):
        if uuid in visible or indexes.get(uuid) in visible:
            found.append(f"GPU {indexes.get(uuid, '?')} ({uuid}): {used} MiB held by {describe(pid)}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for memory to be freed")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--gpus", default="", help="the instance's GPUs (UUIDs), comma separated")
    args = parser.parse_args()
    visible = [gpu.strip() for gpu in args.gpus.split(",") if gpu.strip()]
    deadline = time.monotonic() + args.wait
    while True:
        found = foreign_processes(args.nvidia_smi, visible)
        if not found:
            return 0
        if time.monotonic() >= deadline:
            print(f"GPU(s) {','.join(visible)} are not free; not starting:", file=sys.stderr)
            for line in found:
                print(f"  {line}", file=sys.stderr)
            return 1
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
