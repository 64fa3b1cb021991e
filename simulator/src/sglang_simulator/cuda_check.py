"""The simulator's answer to sglang-fleet's CUDA smoke check (``cuda_smoke_check.py`` on real hosts).

Usage: python -m sglang_simulator.cuda_check --expect N [--all-reduce]

Same command line, output (one JSON line) and exit codes as the real check, with the stand-in GPUs:
the devices this process can see are those of ``visible_gpus`` (CUDA_VISIBLE_DEVICES over the GPUs whose
device nodes it may open, as CUDA enumerates them under a device cgroup); "allocating" needs free memory
on each (other processes' usage records count); the all-reduce is not simulated beyond needing every
GPU (there is no NCCL here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .gpus import GpuError, live_usages, load_inventory, visible_gpus
from .knobs import Knobs

ALLOCATION_MIB = 16


def check(expect: int, with_all_reduce: bool, env: Mapping[str, str]) -> dict[str, Any]:
    knobs = Knobs.from_env(env)
    try:
        inventory = load_inventory(knobs.gpus_file)
    except GpuError as error:
        return {"ok": False, "error": f"RuntimeError: Found no NVIDIA driver on your system ({error})"}
    visible = visible_gpus(inventory, env.get("CUDA_VISIBLE_DEVICES"))
    devices = [{"name": gpu.name, "uuid": gpu.uuid, "memory_mib": gpu.memory_total_mib} for gpu in visible]
    if len(visible) != expect:
        return {
            "ok": False,
            "devices": devices,
            "error": f"CUDA sees {len(visible)} GPU(s), expected {expect}",
        }
    used: dict[str, int] = {}
    for usage in live_usages(knobs.state_dir):
        for uuid in usage.gpu_uuids:
            used[uuid] = used.get(uuid, 0) + usage.used_mib
    for ordinal, gpu in enumerate(visible):
        if gpu.memory_total_mib - used.get(gpu.uuid, 0) < ALLOCATION_MIB:
            return {
                "ok": False,
                "devices": devices,
                "error": "torch.OutOfMemoryError: CUDA out of memory. "
                f"Tried to allocate {ALLOCATION_MIB}.00 MiB. GPU {ordinal} has a total capacity of "
                f"{gpu.memory_total_mib / 1024:.2f} GiB",
            }
    return {"ok": True, "devices": devices, "all_reduce": with_all_reduce and len(visible) > 1}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cuda_check", description=__doc__)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--all-reduce", action="store_true")
    args = parser.parse_args(argv)
    result = check(args.expect, args.all_reduce, os.environ if env is None else env)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
