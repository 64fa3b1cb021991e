"""Benchmark of the fleet at scale (issue 41; prints figures, not a test). Run by `make bench-scale`.

On the scale rehearsal's light hosts (inventory/scale, scripts/scale-hosts.sh: started for 12 when absent), for the
first 2, 6 and 12 hosts (`--limit 'sglang_servers[0:N-1]'`), in one run:
- a no-op deploy: its wall time, and the control node's CPU seconds (ansible-playbook and every process it starts,
  the `docker exec` of each task included: this process's children, from getrusage) per host;
- the rollout of a new model revision (a deploy of revision rK: the fan-out, then every instance restarted on it), with
  the capacity budget sglang_rollout_max_unavailable at 1 and at 25%, under load through the fleet gateway on scale01
  (tests/fleet.load_through_router, 4 clients): the deploy's wall time, the rollout's own (its waves: from the plan of
  the waves to the last wave's end, from the run's events), and the requests that failed. Every run has
  `--forks` at least the hosts (ansible.cfg's 10 would run each task of 12 hosts in two batches);
- the model's bytes for the budget-1 change: sent by the control node (rsync's own "Total bytes sent" of each
  synchronize from the control node's cache) and by peers (rsync's "Total bytes received" of each copy between
  hosts, and the hosts' network interfaces: bytes sent, loopback left out; the control node reaches the hosts
  through `docker exec`, so the interfaces carry the copies between hosts only), and each host's memory.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, Run, load_through_router, on_host, run_playbook

INVENTORY = ROOT / "inventory/scale"
# Instances a scale host runs: one a stand-in GPU (inventory/scale/group_vars/sglang_servers.yml).
PER_HOST = int(yaml.safe_load((INVENTORY / "group_vars/sglang_servers.yml").read_text())["sandbox_machine"]["gpus"]["count"])
SCRIPT = ROOT / "scripts/scale-hosts.sh"
# BENCH_SCALE_SIZES="2 6" measures fewer (the 12-host figures take the longest).
SIZES = tuple(int(size) for size in os.environ.get("BENCH_SCALE_SIZES", "2 6 12").split())
INTERFACES = r"""for d in /sys/class/net/*; do n=${d##*/}; [ "$n" = lo ] && continue; cat $d/statistics/tx_bytes; done"""
MEMORY = "ps -e -o rss= | awk '{s += $1} END {print s}'"
GATEWAY = "https://127.0.0.1:30200"  # inventory/scale: TLS with the test CA of scripts/scale-hosts.sh
GATEWAY_KEYS = "/etc/sglang-router/gateway.json"
# The rollout's own tasks (roles/sglang_server/tasks/roll_waves.yml and the waves it includes).
ROLLOUT_TASKS = ("roll_waves.yml", "roll_wave.yml")
ROLL_TASK = "Roll this host's instances of the wave, verified, rolled back on failure"
BUDGETS = ("1", "25%")
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
    run = run_playbook(
        "deploy.yml", INVENTORY, extravars, limit=f"sglang_servers[0:{count - 1}]", cmdline=f"--forks {max(count, 10)}"
    )
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


def rollout_seconds(run: Run) -> float:
    """The rollout's own wall time: from the first to the last event of its tasks (the waves' plan and the waves)."""
    times = [
        datetime.fromisoformat(event["created"]).timestamp()
        for event in run.events
        if str((event.get("event_data") or {}).get("task_path", "")).split(":")[0].endswith(ROLLOUT_TASKS)
    ]
    return max(times) - min(times) if times else 0.0


def created(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def wave_profile(run: Run) -> tuple[int, float, float]:
    """Where a rollout's time goes: its waves, their mean wall seconds (from a wave's task start to the next's; the
    last to its last result) and of it the mean longest rollout module call (drain, restart, verify on the wave's hosts
    side by side); the rest is Ansible's (the include and the task on every host of the run)."""
    starts = [
        (created(event), event["event_data"]["task_uuid"])
        for event in run.events
        if event.get("event") == "playbook_on_task_start" and event["event_data"].get("task") == ROLL_TASK
    ]
    if not starts:
        return 0, 0.0, 0.0
    walls, modules = [], []
    for index, (start, uuid) in enumerate(starts):
        own = [event for event in run.events if (event.get("event_data") or {}).get("task_uuid") == uuid]
        ends = [created(event) for event in own]
        walls.append((starts[index + 1][0] if index + 1 < len(starts) else max(ends)) - start)
        modules.append(
            max(
                (float(event["event_data"].get("duration") or 0.0) for event in own if event.get("event") == "runner_on_ok"),
                default=0.0,
            )
        )
    return len(starts), sum(walls) / len(walls), sum(modules) / len(modules)


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
        changes: dict[str, dict[str, Any]] = {}
        for budget in BUDGETS:
            revision += 1
            subprocess.run([str(SCRIPT), "model", str(revision)], check=True, cwd=ROOT)
            tx = interfaces_tx(names)
            with load_through_router(GATEWAY, host="scale01", keys_file=GATEWAY_KEYS) as load:
                run, wall, _ = deploy(count, {"scale_revision": f"r{revision}", "sglang_rollout_max_unavailable": budget})
            changes[budget] = {
                "wall": wall,
                "rollout": rollout_seconds(run),
                "waves": wave_profile(run),
                "control": rsync_bytes(run, "Send the files the host lacks from the control node", SENT),
                "peers": rsync_bytes(run, "Copy the files the host lacks from its peer", RECEIVED),
                "interfaces": interfaces_tx(names) - tx,
                "load": load,
            }
        rows.append((count, changes))
        one, quarter = changes["1"], changes["25%"]
        print(
            f"N={count:>2}: no-op deploy {noop_wall:6.1f} s wall, control node CPU {noop_cpu / count:5.2f} s/host "
            f"({noop_cpu:.1f} s, --forks {max(count, 10)})",
            flush=True,
        )
        for budget, change in changes.items():
            waves, wave_wall, wave_module = change["waves"]
            print(
                f"      new revision, sglang_rollout_max_unavailable {budget:>3}: deploy {change['wall']:6.1f} s, of it the "
                f"rollout {change['rollout']:6.1f} s; through the gateway {change['load']['failed']} of "
                f"{change['load']['requests']} requests failed; model bytes: control node {change['control']:,} B, "
                f"peers {change['peers']:,} B (hosts' interfaces sent {change['interfaces']:,} B); {waves} waves, each "
                f"{wave_wall:.1f} s on average, of it the rollout module (drain, restart, verify) {wave_module:.1f} s",
                flush=True,
            )
        print(
            f"      25% vs 1: deploy {quarter['wall'] / one['wall']:.2f}, "
            f"rollout {quarter['rollout'] / max(one['rollout'], 1e-9):.2f} (issue 41's goal for 12 hosts: at most 0.33; "
            f"25% of {count * PER_HOST} instances ({PER_HOST} a host) is {max(1, count * PER_HOST * 25 // 100)} at a time: "
            f"{one['waves'][0]} vs {quarter['waves'][0]} waves)",
            flush=True,
        )
    if len(rows) < 2:
        return
    control = [row[1]["1"]["control"] for row in rows]
    print(
        f"control node's model bytes, N={rows[0][0]} vs N={rows[-1][0]}: {control[0]:,} vs {control[-1]:,} B "
        f"({(control[-1] - control[0]) / max(control[0], 1):+.1%})"
    )


if __name__ == "__main__":
    main()
