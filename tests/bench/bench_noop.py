"""Benchmark of a converged fleet's no-op deploy on the sandbox (prints figures; not a test). Run by `make bench`.

Measured in one run, each the median of three:
- `ansible -m setup` on both hosts (fact gathering alone: the floor any playbook pays),
- a no-op `ansible-playbook deploy.yml` (must report changed=0) and `--check --diff`, as ratios to that floor,
- the no-op deploy of ct129 alone (1 instance) against b200 alone (7 instances): the cost per instance.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, run_playbook

ROUNDS = 3


def seconds(action: Callable[[], None]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def setup() -> None:
    subprocess.run(
        [str(ROOT / ".venv/bin/ansible"), "sglang_servers", "-m", "ansible.builtin.setup"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip


def deploy(limit: str | None = None, cmdline: str | None = None) -> None:
    run = run_playbook("deploy.yml", limit=limit, cmdline=cmdline)
    if run.rc != 0 or run.changed_count() != 0:
        raise RuntimeError(f"not a no-op: rc={run.rc}, changed={run.changed()}, {run.failure_messages()}")


def median(action: Callable[[], None]) -> float:
    return statistics.median(seconds(action) for _ in range(ROUNDS))


def main() -> None:
    deploy()  # converged first
    floor = median(setup)
    noop = median(deploy)
    check = median(lambda: deploy(cmdline="--check --diff"))
    one = median(lambda: deploy(limit="ct129"))
    seven = median(lambda: deploy(limit="b200"))
    print(f"ansible -m setup, both hosts:        {floor:6.1f} s")
    print(f"no-op deploy.yml (changed=0):        {noop:6.1f} s  = {noop / floor:4.1f}x setup (goal <= 2.0x)")
    print(f"--check --diff (changed=0):          {check:6.1f} s  = {check / floor:4.1f}x setup")
    print(f"no-op, ct129 alone (1 instance):     {one:6.1f} s")
    print(f"no-op, b200 alone (7 instances):     {seven:6.1f} s  = {seven / one:4.2f}x ct129 (goal <= 1.20x)")


if __name__ == "__main__":
    main()
