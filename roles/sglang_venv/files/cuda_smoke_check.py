"""CUDA smoke check of one SGLang instance, as preflight runs it: inside the instance's own sandbox.

Usage: python cuda_smoke_check.py --expect N [--all-reduce]

Run with the instance's environment (CUDA_VISIBLE_DEVICES by UUID) under `systemd-run` with the instance
unit's user, device policy and sandboxing. It checks what SGLang will need at start: CUDA sees exactly N
GPUs, memory can be allocated on each, and with N > 1 one NCCL all-reduce across them completes (one
process per GPU, as SGLang's tensor parallel ranks). Prints one JSON line and exits 0 when all passed,
1 otherwise. Installed into the venv by sglang-fleet.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
from typing import Any

ALLOCATION_FLOATS = 4 << 20  # 16 MiB on each GPU
ALL_REDUCE_TIMEOUT = 120.0


def device_summary(torch: Any, index: int) -> dict[str, Any]:
    properties = torch.cuda.get_device_properties(index)
    uuid = getattr(properties, "uuid", None)
    return {"name": properties.name, "uuid": f"GPU-{uuid}" if uuid else None, "memory_mib": properties.total_memory >> 20}


def allocate_on_each(torch: Any, count: int) -> None:
    for index in range(count):
        block = torch.ones(ALLOCATION_FLOATS, dtype=torch.float32, device=f"cuda:{index}")
        if int(block.sum().item()) != ALLOCATION_FLOATS:
            raise RuntimeError(f"GPU {index} computed a wrong sum")
        del block
        torch.cuda.synchronize(index)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def all_reduce_rank(rank: int, world: int, port: int, results: Any) -> None:
    """One tensor-parallel-like rank: all-reduce (rank + 1) over NCCL; reports the sum it got."""
    import torch
    import torch.distributed as dist

    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        value = torch.full((1024,), float(rank + 1), device=f"cuda:{rank}")
        dist.all_reduce(value)
        torch.cuda.synchronize(rank)
        results.put((rank, float(value[0].item()), ""))
        dist.destroy_process_group()
    except Exception as error:
        results.put((rank, None, f"{type(error).__name__}: {error}"))


def all_reduce(world: int) -> str | None:
    """None when an NCCL all-reduce over `world` GPUs gives every rank the right sum, else why not."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=all_reduce_rank, args=(rank, world, port, results)) for rank in range(world)]
    for process in ranks:
        process.start()
    expected = world * (world + 1) / 2
    problems = []
    try:
        for _rank in range(world):
            rank, value, error = results.get(timeout=ALL_REDUCE_TIMEOUT)
            if error or value != expected:
                problems.append(f"rank {rank}: {error or f'sum {value}, expected {expected}'}")
    except Exception:
        problems.append(
            f"the NCCL all-reduce did not finish within {ALL_REDUCE_TIMEOUT:.0f} s (hangs over PCIe: NCCL_P2P_DISABLE=1)"
        )
    finally:
        for process in ranks:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    return "; ".join(problems) or None


def check(expect: int, with_all_reduce: bool) -> dict[str, Any]:
    try:
        import torch
    except Exception as error:
        return {"ok": False, "error": f"torch does not import: {type(error).__name__}: {error}"}
    try:
        count = torch.cuda.device_count()
        devices = [device_summary(torch, index) for index in range(count)]
        if count != expect:
            return {"ok": False, "devices": devices, "error": f"CUDA sees {count} GPU(s), expected {expect}"}
        allocate_on_each(torch, count)
    except Exception as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
    problem = all_reduce(count) if with_all_reduce and count > 1 else None
    if problem:
        return {"ok": False, "devices": devices, "error": problem}
    return {"ok": True, "devices": devices, "all_reduce": with_all_reduce and count > 1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--expect", type=int, required=True, help="GPUs the instance must see")
    parser.add_argument("--all-reduce", action="store_true", help="with more than one GPU, complete one NCCL all-reduce")
    args = parser.parse_args()
    result = check(args.expect, args.all_reduce)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
