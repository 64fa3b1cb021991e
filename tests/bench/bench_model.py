"""Benchmark of a model fetched through the role sglang_model (prints figures; not a test). Run by `make bench`.

Against the local mirror (olah serving the generated repository, tests/mirror.py), in one run:
- bytes fetched from the source with an empty control-node cache, for ct129 alone and for both hosts (`--check`:
  the fetch is the control node's; goal: equal, one download whatever the number of hosts);
- after a deploy of the model to ct129, a no-op deploy: files hashed by the plan's probe and by the fetch (goal: none)
  and the seconds the fetch and the probe took.
The sandbox's ct129 is put back on its own model afterwards.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleet import Run, on_host, overlay_inventory, run_playbook
from mirror import start_mirror


def task_results(run: Run, prefix: str) -> list[dict[str, Any]]:
    return [data for data in run.results() if data["task"].startswith(prefix)]


def checked(run: Run) -> Run:
    if run.rc != 0:
        raise RuntimeError(f"rc={run.rc}: {run.failure_messages()}")
    return run


def main() -> None:
    mirror = start_mirror()
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-bench-model-") as scratch:
        base = Path(scratch)
        inventory = overlay_inventory(base)

        def settings(cache: str) -> dict[str, Any]:
            source = {"repo": mirror.repo, "revision": mirror.commits[-1]}
            return {"sglang_model_path": "", "sglang_model": source, "sglang_model_endpoint": mirror.endpoint,
                    "sglang_model_cache_dir": str(base / cache)}  # fmt: skip

        checked(run_playbook("playbooks/model_lock.yml", inventory=inventory, extravars=settings("lock")))
        fetched = {}
        for hosts, limit in (("1 host (ct129)", "ct129"), ("2 hosts", None)):
            variables = settings(limit or "all")
            run = checked(run_playbook("deploy.yml", inventory=inventory, extravars=variables, limit=limit, cmdline="--check"))
            fetched[hosts] = sum(data["res"]["fetched_bytes"] for data in task_results(run, "Fetch the model's files"))
        root = f"/srv/models/{mirror.repo.replace('/', '--')}"
        try:
            checked(run_playbook("deploy.yml", inventory=inventory, extravars=settings("all"), limit="ct129"))
            noop = checked(run_playbook("deploy.yml", inventory=inventory, extravars=settings("all"), limit="ct129"))
        finally:
            # Back to the sandbox's own revision of the same model (the first); the bench's goes.
            checked(run_playbook("deploy.yml", limit="ct129"))
            on_host("ct129", "rm", "-rf", f"{root}/{mirror.commits[-1]}")
    [fetch] = [data["res"] for data in task_results(noop, "Fetch the model's files")]
    [probe] = [data for data in task_results(noop, "Gather GPUs")]
    fetch_seconds = [data["duration"] for data in task_results(noop, "Fetch the model's files")]
    hashed = len(probe["res"]["model"]["hashed"]) + len(fetch.get("hashed", []))
    one, two = fetched["1 host (ct129)"], fetched["2 hosts"]
    for hosts, count in fetched.items():
        print(f"bytes fetched from the source, {hosts + ':':16} {count:>10,} B")
    print(f"bytes fetched, 2 hosts / 1 host:  {two / one:.2f} (goal 1.00)")
    print(f"no-op deploy of the model, ct129: changed={noop.changed_count()}, files hashed: {hashed} (goal 0)")
    print(f"  the fetch's check of the cache: {fetch_seconds[0]:.2f} s")
    print(f"  the plan's probe (host facts and the model's files): {probe['duration']:.2f} s")


if __name__ == "__main__":
    main()
