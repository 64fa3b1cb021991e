"""Benchmark of real installs (prints figures; not a test). Run by `make bench-install`; needs ~50 GB of disk.

Installs CUDA (NVIDIA's wheels) and the pinned SGLang on fresh b200-shaped test hosts with
`deploy.yml --tags preflight,install`, three times:

- 1 host, empty wheelhouse cache (cold);
- 1 host, the cache filled by the run before (warm);
- 2 hosts, empty cache (cold): what a fleet of two costs compared with one host.

For each it reports the install time and the bytes fetched from package indexes: what this machine's
network interfaces received during the run (the control node's wheelhouse download and each host's CUDA
wheels and distribution packages; test hosts reach the indexes through this machine), and how much of it
the wheelhouse holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import SANDBOX_INVENTORY, run_playbook

CACHE = Path.home() / ".cache/sglang-fleet/wheelhouse"
NETWORK_COUNTERS = Path("/proc/net/dev")


@dataclass(frozen=True)
class Install:
    hosts: int
    cache: str
    seconds: float
    received_bytes: int
    wheelhouse_bytes: int


def received_bytes() -> int:
    """Bytes received so far by the interfaces that lead out of this machine (not loopback, bridges or veths)."""
    total = 0
    for line in NETWORK_COUNTERS.read_text().splitlines()[2:]:
        name, counters = line.split(":", 1)
        if name.strip().startswith(("lo", "docker", "veth", "br-", "ifb")):
            continue
        total += int(counters.split()[0])
    return total


def wheel_bytes() -> int:
    return sum(f.stat().st_size for f in CACHE.rglob("*.whl")) if CACHE.exists() else 0


def inventory(directory: Path, hosts: list[str]) -> Path:
    """b200-shaped test hosts running real SGLang (installed only; there is no GPU to serve with)."""
    target = directory / "inventory"
    (target / "group_vars").mkdir(parents=True)
    (target / "host_vars").mkdir()
    group = yaml.safe_load((SANDBOX_INVENTORY / "group_vars/all.yml").read_text())
    b200 = group["sandbox_machines"]["b200"]
    group["sandbox_machines"] = dict.fromkeys(hosts, b200)
    group["sglang_venv_runtime"] = "sglang"
    (target / "group_vars/all.yml").write_text(yaml.safe_dump(group))
    for host in hosts:
        shutil.copy(SANDBOX_INVENTORY / "host_vars/b200.yml", target / "host_vars" / f"{host}.yml")
    (target / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "sglang_servers": {
                    "hosts": {h: {"ansible_host": f"sglang-bench-{h}"} for h in hosts},
                    "vars": {"ansible_connection": "community.docker.docker"},
                }
            }
        )
    )
    return target


def install(hosts: list[str], cache: str) -> Install:
    if cache == "empty":
        shutil.rmtree(CACHE, ignore_errors=True)
    with tempfile.TemporaryDirectory() as directory:
        # pip's own download cache would hide what a cold run fetches: each run starts with an empty one.
        os.environ["PIP_CACHE_DIR"] = str(Path(directory) / "pip-cache")
        hosts_inventory = inventory(Path(directory), hosts)
        try:
            assert run_playbook("playbooks/sandbox.yml", inventory=hosts_inventory).rc == 0
            wheels_before, received_before = wheel_bytes(), received_bytes()
            start = time.monotonic()
            run = run_playbook("deploy.yml", inventory=hosts_inventory, tags="preflight,install")
            seconds = time.monotonic() - start
            if run.rc != 0:
                raise RuntimeError(run.failure_messages())
            return Install(len(hosts), cache, seconds, received_bytes() - received_before, wheel_bytes() - wheels_before)
        finally:
            subprocess.run(["docker", "rm", "--force", *(f"sglang-bench-{h}" for h in hosts)], capture_output=True, check=False)


def main() -> int:
    aside = CACHE.with_name("wheelhouse.bench-aside")
    if CACHE.exists():
        CACHE.rename(aside)
    try:
        results = [install(["one"], "empty"), install(["one"], "filled"), install(["one", "two"], "empty")]
    finally:
        if aside.exists():
            shutil.rmtree(CACHE, ignore_errors=True)
            aside.rename(CACHE)
    report(results)
    return 0


def report(results: list[Install]) -> None:
    print("sglang-fleet install benchmark: SGLang 0.5.23 + sglang-router 0.3.2 + CUDA 13.0 wheels on b200-shaped test hosts")
    print(f"  {'hosts':>5}  {'wheelhouse cache':<16}  {'install':>8}  {'wheels downloaded':>17}  {'network received':>16}")
    for result in results:
        print(
            f"  {result.hosts:>5}  {result.cache:<16}  {result.seconds:>6.0f} s  {result.wheelhouse_bytes / 1e9:>14.2f} GB"
            f"  {result.received_bytes / 1e9:>13.2f} GB"
        )
    print("  wheels downloaded: what the control node's wheelhouse fetched from the package indexes (once for all hosts);")
    print("  network received: every byte this machine's interfaces received (wheelhouse, each host's CUDA wheels and")
    print("  distribution packages); lower than the wheels where pip's configuration also reads a local mirror.")


if __name__ == "__main__":
    sys.exit(main())
