"""``python -m sglang_simulator.gpu_hog --gpus 0,1 --mib 1000``.

Pretends to be a process holding GPU memory (for example an orphaned SGLang
scheduler that survived its service): records the usage for the nvidia-smi
stand-in and sleeps until killed.  SIGTERM/SIGINT remove the record and exit
0; SIGKILL leaves a record whose pid is dead, which nvidia-smi ignores, just
as the driver frees the memory of a killed process.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .gpus import GpuError, Usage, load_inventory, remove_usage, write_usage
from .knobs import DEFAULT_GPUS_FILE, DEFAULT_STATE_DIR


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_simulator.gpu_hog")
    parser.add_argument("--gpus", required=True, help="comma list of GPU indexes or UUIDs")
    parser.add_argument("--mib", type=int, required=True, help="MiB held on each GPU")
    parser.add_argument("--process-name", default="python3")
    args = parser.parse_args(argv)
    env = os.environ
    try:
        inventory = load_inventory(Path(env.get("SGLANG_SIM_GPUS_FILE") or DEFAULT_GPUS_FILE))
    except GpuError as exc:
        print(f"gpu_hog: {exc}", file=sys.stderr)
        return 1
    uuids: list[str] = []
    for ident in (s.strip() for s in args.gpus.split(",") if s.strip()):
        match = [g.uuid for g in inventory.gpus if str(g.index) == ident or g.uuid == ident]
        if not match:
            print(f"gpu_hog: no GPU {ident!r} in the GPU list file", file=sys.stderr)
            return 1
        uuids.append(match[0])
    state_dir = Path(env.get("SGLANG_SIM_STATE_DIR") or DEFAULT_STATE_DIR)
    pid = os.getpid()
    try:
        write_usage(state_dir, Usage(pid, tuple(uuids), args.mib, args.process_name))
    except OSError as exc:
        print(f"gpu_hog: cannot write to {state_dir}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    print(f"gpu_hog: pid {pid} holds {args.mib} MiB on {', '.join(uuids)}", file=sys.stderr, flush=True)
    stop.wait()
    remove_usage(state_dir, pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
