"""Benchmark of the fleet at scale (issue 41; prints figures, not a test). Run by `make bench-scale`.

On the scale rehearsal's light hosts (inventory/scale, scripts/scale-hosts.sh: started for 12 when absent), for the
first 2, 6 and 12 hosts (`--limit 'sglang_servers[0:N-1]'`), in one run:
- a no-op deploy: its wall time, and the control node's CPU seconds (ansible-playbook and every process it starts,
  the `docker exec` of each task included: this process's children, from getrusage) per host;
- the rollout of a new model revision (a deploy of revision rK: the fan-out, then every instance restarted on it), with
  the budget at 1 and at 25% of the hosts. This branch has no sglang_rollout_max_unavailable (issue 41, part A): the
  budget is sglang_server_rollout_hosts, hosts restarted at a time (1, then ceil(N/4));
- the model's bytes for the budget-1 change: sent by the control node (rsync's own "Total bytes sent" of each
  synchronize from the control node's cache) and by peers (rsync's "Total bytes received" of each copy between
  hosts, and the hosts' network interfaces: bytes sent, loopback left out; the control node reaches the hosts
  through `docker exec`, so the interfaces carry the copies between hosts only), and each host's memory.
"""

from __future__ import annotations

import math
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, Run, on_host, run_playbook

INVENTORY = ROOT / "inventory/scale"
SCRIPT = ROOT / "scripts/scale-hosts.sh"
# BENCH_SCALE_SIZES="2 6" measures fewer (the 12-host figures take the longest).
SIZES = tuple(int(size) for size in os.environ.get("BENCH_SCALE_SIZES", "2 6 12").split())
INTERFACES = r"""for d in /sys/class/net/*; do n=${d##*/}; [ "$n" = lo ] && continue; cat $d/statistics/tx_bytes; done"""
MEMORY = "ps -e -o rss= | awk '{s += $1} END {print s}'"
SENT = re.compile(r"Total bytes sent: ([\d,.]+)")
RECEIVED = re.compile(r"Total bytes received: ([\d,.]+)")


def hosts(count: int) -> list[str]:
    return [f"scale{n:02d}" for n in range(1, count + 1)]


def running() -> list[str]:
    names = subprocess.run(
        ["docker", "ps", "--filter", "label=sglang-fleet=scale", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return sorted(names)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def deploy(count: int, extravars: dict[str, Any] | None = None) -> tuple[Run, float, float]:
    """A deploy of the first `count` hosts: the run, its wall seconds and the control node's CPU seconds."""
    cpu, start = children_cpu(), time.monotonic()
    run = run_playbook("deploy.yml", INVENTORY, extravars, limit=f"sglang_servers[0:{count - 1}]")
    wall, cpu = time.monotonic() - start, children_cpu() - cpu
    if run.rc != 0:
        raise RuntimeError(f"deploy of {count} hosts: rc={run.rc}: {run.failure_messages()}")
    return run, wall, cpu


def rsync_bytes(run: Run, task: str, pattern: re.Pattern[str]) -> int:
    total = 0
    for data in run.results():
        if data["task"].startswith(task):
            res = data["res"]
            text = str(res.get("msg", "")) + str(res.get("stdout", ""))
            total += sum(int(float(found.replace(",", ""))) for found in pattern.findall(text))
    return total


def interfaces_tx(names: list[str]) -> int:
    return sum(int(line) for host in names for line in on_host(host, "sh", "-c", INTERFACES).split())


def main() -> None:
    if len(running()) < max(SIZES):
        subprocess.run([str(SCRIPT), "start", str(max(SIZES))], check=True, cwd=ROOT)
    memory = {host: int(on_host(host, "sh", "-c", MEMORY)) for host in hosts(max(SIZES))}
    print(
        f"memory per host (RSS of every process in the container): mean {sum(memory.values()) / len(memory) / 1024:.0f} MiB, "
        f"max {max(memory.values()) / 1024:.0f} MiB ({len(memory)} hosts)"
    )
    revision = int(time.time())  # A revision no host has had: each change below is new everywhere.
    rows = []
    for count in SIZES:
        names = hosts(count)
        deploy(count)  # Every host on the current revision and settings first.
        _, noop_wall, noop_cpu = deploy(count)
        changes = {}
        for budget in (1, math.ceil(count / 4)):
            revision += 1
            subprocess.run([str(SCRIPT), "model", str(revision)], check=True, cwd=ROOT)
            tx = interfaces_tx(names)
            run, wall, _ = deploy(count, {"scale_revision": f"r{revision}", "sglang_server_rollout_hosts": budget})
            changes[budget] = (
                wall,
                rsync_bytes(run, "Send the files the host lacks from the control node", SENT),
                rsync_bytes(run, "Copy the files the host lacks from its peer", RECEIVED),
                interfaces_tx(names) - tx,
            )
        rows.append((count, noop_wall, noop_cpu, changes))
        one, quarter = changes[1], changes[math.ceil(count / 4)]
        print(
            f"N={count:>2}: no-op deploy {noop_wall:6.1f} s wall, control node CPU {noop_cpu / count:5.2f} s/host "
            f"({noop_cpu:.1f} s); new revision, budget 1: {one[0]:6.1f} s; budget 25% "
            f"({math.ceil(count / 4)} host(s) at a time): {quarter[0]:6.1f} s; model bytes (budget-1 change): "
            f"control node {one[1]:,} B, peers {one[2]:,} B (hosts' interfaces sent {one[3]:,} B)",
            flush=True,
        )
    print("budget: sglang_server_rollout_hosts (hosts restarted at a time); sglang_rollout_max_unavailable is not on this branch")
    control = [row[3][1][1] for row in rows]
    if len(rows) < 2:
        return
    print(
        f"control node's model bytes, N={rows[0][0]} vs N={rows[-1][0]}: {control[0]:,} vs {control[-1]:,} B "
        f"({(control[-1] - control[0]) / max(control[0], 1):+.1%})"
    )


if __name__ == "__main__":
    main()
