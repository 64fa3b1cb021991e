"""Benchmark of a model fetched through the role sglang_model (prints figures; not a test). Run by `make bench`.

Against the local mirror (olah serving the generated repository, tests/mirror.py), with every byte counted outside
the product: at the mirror, by a counting proxy on loopback in front of it (tests/mirror.py CountingProxy: the
bytes of every answer it relays, the mirror's redirects rewritten to stay behind it), and on the hosts' network
interfaces (/sys/class/net/*/statistics inside each container, loopback left out). In one run:
- bytes the mirror sent with an empty control-node cache, for ct129 alone and for both hosts (`--check`: the fetch
  is the control node's; goal: equal, one download whatever the number of hosts; the hosts' interfaces: nothing);
- a deploy of the model to ct129 from the control node's cache (the mirror: no file again) and what landed there;
- then a no-op deploy: the mirror and the interfaces (goal: no file bytes), changed, and the files the product says
  it hashed (its own report: hashing leaves no trace outside it) and the seconds the fetch and the probe took.
The sandbox's ct129 is put back on its own model afterwards. The sandbox reaches its hosts with Ansible's docker
connection: the files a deploy sends go through `docker exec`, not the hosts' interfaces, which therefore show
whether a host fetched anything itself (goal: nothing).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import SANDBOX_HOSTS, Run, on_host, overlay_inventory, run_playbook
from mirror import CountingProxy, start_mirror

INTERFACES = r"""for d in /sys/class/net/*; do n=${d##*/}; [ "$n" = lo ] && continue
echo "$n $(cat $d/statistics/rx_bytes) $(cat $d/statistics/tx_bytes)"; done"""


def task_results(run: Run, prefix: str) -> list[dict[str, Any]]:
    return [data for data in run.results() if data["task"].startswith(prefix)]


def checked(run: Run) -> Run:
    if run.rc != 0:
        raise RuntimeError(f"rc={run.rc}: {run.failure_messages()}")
    return run


def interface_bytes(host: str) -> dict[str, tuple[int, int]]:
    """Received and sent bytes of each of the host's interfaces but loopback."""
    rows = (line.split() for line in on_host(host, "sh", "-c", INTERFACES).splitlines() if line.strip())
    return {name: (int(rx), int(tx)) for name, rx, tx in rows}


class Measured:
    """What the mirror sent and what crossed each host's interfaces during one step."""

    def __init__(self, proxy: CountingProxy) -> None:
        self.proxy = proxy
        self.mirror_body = self.mirror_wire = 0
        self.requests = 0
        self.hosts: dict[str, tuple[int, int]] = {}

    def run(self, step: Callable[[], Run]) -> Run:
        before = {host: interface_bytes(host) for host in SANDBOX_HOSTS}
        self.proxy.traffic.reset()
        run = step()
        traffic = self.proxy.traffic
        self.mirror_body, self.mirror_wire = traffic.body_bytes, traffic.bytes_sent
        self.requests = sum(traffic.requests.values())
        for host, counters in before.items():
            after = interface_bytes(host)
            rx = sum(after[name][0] - counters.get(name, (0, 0))[0] for name in after)
            tx = sum(after[name][1] - counters.get(name, (0, 0))[1] for name in after)
            self.hosts[host] = (rx, tx)
        return run

    def line(self) -> str:
        hosts = ", ".join(f"{host} rx {rx:,} tx {tx:,} B" for host, (rx, tx) in self.hosts.items())
        mirror = f"mirror sent {self.mirror_body:>9,} B of bodies ({self.mirror_wire:,} B with headers, {self.requests} requests)"
        return f"{mirror}; {hosts}"


def main() -> None:
    mirror = start_mirror()
    proxy = CountingProxy(mirror.endpoint)
    try:
        with tempfile.TemporaryDirectory(prefix="sglang-fleet-bench-model-") as scratch:
            base = Path(scratch)
            inventory = overlay_inventory(base)

            def settings(cache: str) -> dict[str, Any]:
                source = {"repo": mirror.repo, "revision": mirror.commits[-1]}
                return {"sglang_model_path": "", "sglang_model": source, "sglang_model_endpoint": proxy.endpoint,
                        "sglang_model_cache_dir": str(base / cache)}  # fmt: skip

            checked(run_playbook("playbooks/model_lock.yml", inventory=inventory, extravars=settings("lock")))
            fetched: dict[str, Measured] = {}
            reported: dict[str, int] = {}
            for hosts, limit in (("1 host (ct129)", "ct129"), ("2 hosts", None)):
                measured = fetched[hosts] = Measured(proxy)
                variables = settings(limit or "all")

                def check(variables: dict[str, Any] = variables, limit: str | None = limit) -> Run:
                    run = run_playbook("deploy.yml", inventory=inventory, extravars=variables, limit=limit, cmdline="--check")
                    return checked(run)

                run = measured.run(check)
                reported[hosts] = sum(data["res"]["fetched_bytes"] for data in task_results(run, "Fetch the model's files"))
            root = f"/srv/models/{mirror.repo.replace('/', '--')}"
            deploy, noop = Measured(proxy), Measured(proxy)

            def to_ct129() -> Run:
                return checked(run_playbook("deploy.yml", inventory=inventory, extravars=settings("all"), limit="ct129"))

            try:
                deploy.run(to_ct129)
                landed = int(on_host("ct129", "du", "-sb", "--apparent-size", f"{root}/{mirror.commits[-1]}").split()[0])
                run = noop.run(to_ct129)
            finally:
                # Back to the sandbox's own revision of the same model (the first); the bench's goes.
                checked(run_playbook("deploy.yml", limit="ct129"))
                on_host("ct129", "rm", "-rf", f"{root}/{mirror.commits[-1]}")
    finally:
        proxy.close()
    [fetch] = [data["res"] for data in task_results(run, "Fetch the model's files")]
    [probe] = [data for data in task_results(run, "Gather GPUs")]
    fetch_seconds = [data["duration"] for data in task_results(run, "Fetch the model's files")]
    hashed = len(probe["res"]["model"]["hashed"]) + len(fetch.get("hashed", []))
    one, two = fetched["1 host (ct129)"].mirror_body, fetched["2 hosts"].mirror_body
    print("model fetch, bytes measured at the mirror (counting proxy) and on the hosts' interfaces (not loopback)")
    for hosts, measured in fetched.items():
        print(f"  empty cache, {hosts + ':':16} {measured.line()}  [the fetch reports {reported[hosts]:,} B]")
    print(f"  mirror bytes, 2 hosts / 1 host: {two / one:.2f} (goal 1.00)")
    print(f"  deploy to ct129 from the cache: {deploy.line()}; {landed:,} B of files landed on ct129")
    print(f"  no-op deploy, ct129:            {noop.line()}; changed={run.changed_count()} (goal: no file bytes, 0)")
    print(f"  files hashed, as the product reports: {hashed} (goal 0)")
    print(f"  the fetch's check of the cache: {fetch_seconds[0]:.2f} s")
    print(f"  the plan's probe (host facts and the model's files): {probe['duration']:.2f} s")


if __name__ == "__main__":
    main()
