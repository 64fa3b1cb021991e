"""Times the real nvidia-smi calls the plan's probe makes (sglang_host_facts), to pin the stand-in's latency: run on a
GPU machine, prints JSON (each call's median and spread over ROUNDS runs, the driver and persistence mode)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

ROUNDS = 15
CALLS = {
    "query_gpu": ["--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id",
                  "--format=csv,noheader,nounits"],
    "query_compute_apps": ["--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"],
    "q_x": ["-q", "-x"],
}  # fmt: skip


def seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    identity = ["nvidia-smi", "--query-gpu=persistence_mode,driver_version,name", "--format=csv,noheader"]
    result: dict[str, object] = {
        "persistence_mode": subprocess.run(identity, capture_output=True, text=True, check=False).stdout.strip(),
        "python_startup": statistics.median(seconds([sys.executable, "-c", "pass"]) for _ in range(ROUNDS)),
    }
    for name, args in CALLS.items():
        runs = [seconds(["nvidia-smi", *args]) for _ in range(ROUNDS)]
        result[name] = {"median": statistics.median(runs), "min": min(runs), "max": max(runs)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
