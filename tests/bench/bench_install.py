"""Benchmark of real installs (prints figures; not a test). Run by `make bench-install`; needs ~35 GB of disk.

Installs CUDA (NVIDIA's wheels) and the pinned SGLang on fresh b200-shaped test hosts with
`deploy.yml --tags preflight,install` and reports, for one host with an empty wheelhouse cache (cold) and
for two hosts with the cache filled (warm): the bytes the control node fetched from package indexes (what
the wheelhouse grew by) and the install time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import ROOT, SANDBOX_INVENTORY, run_playbook

CACHE = Path.home() / ".cache/sglang-fleet/wheelhouse"


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


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def install(hosts: list[str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as directory:
        hosts_inventory = inventory(Path(directory), hosts)
        try:
            assert run_playbook("playbooks/sandbox.yml", inventory=hosts_inventory).rc == 0
            before = size(CACHE)
            start = time.monotonic()
            run = run_playbook("deploy.yml", inventory=hosts_inventory, tags="preflight,install")
            seconds = time.monotonic() - start
            if run.rc != 0:
                raise RuntimeError(run.failure_messages())
            return seconds, size(CACHE) - before
        finally:
            subprocess.run(["docker", "rm", "--force", *(f"sglang-bench-{h}" for h in hosts)], capture_output=True, check=False)


def main() -> int:
    aside = CACHE.with_name("wheelhouse.bench-aside")
    if CACHE.exists():
        CACHE.rename(aside)
    try:
        cold_seconds, cold_bytes = install(["one"])
        warm_seconds, warm_bytes = install(["one", "two"])
    finally:
        if aside.exists():
            shutil.rmtree(CACHE, ignore_errors=True)
            aside.rename(CACHE)
    print("sglang-fleet install benchmark (SGLang 0.5.23 + sglang-router 0.3.2 + CUDA 13.0 wheels, b200-shaped test hosts)")
    print(
        f"  1 host,  empty wheelhouse cache (cold): {cold_seconds:.0f} s, fetched from package indexes {cold_bytes / 1e9:.2f} GB"
    )
    print(
        f"  2 hosts, filled wheelhouse cache (warm): {warm_seconds:.0f} s, fetched from package indexes {warm_bytes / 1e9:.2f} GB"
    )
    print(f"  without the wheelhouse each host would fetch ~{cold_bytes / 1e9:.2f} GB: 2 hosts {2 * cold_bytes / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    assert ROOT.exists()
    sys.exit(main())
