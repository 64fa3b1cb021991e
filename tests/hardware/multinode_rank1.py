"""Real SGLang 0.5.17 as node rank 1 of 2 whose rank 0 never starts (issue 43). Run from the repository root, after
the bundle is unpacked:

    command: HW_SKIP_JIT=1 BUDGET_S=330 HW_DRIVER=tests/hardware/multinode_rank1.py bash tests/hardware/run.sh
    carry: [".hardware"]

Both servers at once, the sandbox's model (tests/fixtures/model_repo.py, revision 1) with ct129's settings and the
machine's flags of sandbox_model.py, plus `--tp-size 2 --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:<port+50>`,
a port nothing listens on:

  rank1.timeout20  with `--dist-timeout 20`: its log, exit status and seconds to exit;
  rank1.default    without --dist-timeout: how long it waits (observed until the budget ends, then killed), and the
                   timeouts torch applies when SGLang passes none (torch.distributed's default_pg_timeout and
                   default_pg_nccl_timeout, printed by this machine's torch).

Meanwhile each server's HTTP port is polled (/health, /health_generate, twice a second, every change of answer
recorded: status 0 when nothing accepts the connection), which says whether a node of another rank answers anything
before it joins rank 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hardware.*, fixtures.*
from fixtures import model_repo
from hardware.driver import PY, HealthRecorder, Json, Run, Server
from hardware.nextn_without_mtp import run_script
from hardware.sandbox_model import CT129, MODEL, argv_for

SERVERS: tuple[tuple[str, int, list[str]], ...] = (
    ("rank1.timeout20", 30100, ["--dist-timeout", "20"]),
    ("rank1.default", 30200, []),
)
TORCH_TIMEOUTS = (
    "import json, torch.distributed.constants as c; "
    "print(json.dumps({name: getattr(c, name).total_seconds() for name in ('default_pg_timeout', 'default_pg_nccl_timeout')"
    " if getattr(c, name, None) is not None}))"
)


def stage_models(run: Run, models: Path, record: Json) -> None:
    model_repo.build_repo(models / MODEL, 1)
    record["files"] = sorted(p.name for p in (models / MODEL).iterdir())


def stage_servers(run: Run, models: Path, record: Json) -> None:
    stages = run.summary["stages"]
    torch_says = subprocess.run([PY, "-c", TORCH_TIMEOUTS], capture_output=True, text=True, timeout=120)
    record["torch_default_timeouts_s"] = torch_says.stdout.strip() or torch_says.stderr[-2000:]
    running: dict[str, tuple[Server, HealthRecorder]] = {}
    deadline = time.time() + max(30.0, run.left() - 25)
    for tag, port, extra in SERVERS:
        argv = [
            *argv_for(models, MODEL, CT129, port),
            *("--tp-size", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", f"127.0.0.1:{port + 50}"),
            *extra,
        ]
        server = Server(run, tag, argv, {})
        health = HealthRecorder(server, f"http://127.0.0.1:{port}", deadline)
        health.start()
        running[tag] = (server, health)
        stages[tag] = {"t_start_s": run.now(), "argv": argv}
    for tag, (server, health) in running.items():
        rec = stages[tag]
        rc = server.wait_exit(max(0.1, deadline - time.time()))
        rec["returncode"] = rc
        rec["exited_by_itself"] = rc is not None
        rec["seconds_to_exit"] = server.rel() if rc is not None else None
        rec["still_running_at_s"] = None if rc is not None else server.rel()
        health.stop.set()
        health.join(timeout=35)
        rec["health"] = health.record()
        rec["killed_returncode"] = server.kill() if rc is None else None
        if rc is not None:
            server.kill()
        rec["first_lines_s"] = {
            "init_torch_distributed": server.first(r"Init torch distributed begin"),
            "error": server.first(r"Error|Timed out|timed out"),
        }
        rec["output_tail"] = server.tail(80)
    record["done"] = True


def headline(run: Run) -> None:
    stages = run.summary["stages"]
    head: Json = {"torch_default_timeouts_s": (stages.get("servers") or {}).get("torch_default_timeouts_s")}
    for tag, _, _ in SERVERS:
        st = stages.get(tag) or {}
        head[tag] = {k: st.get(k) for k in ("returncode", "seconds_to_exit", "still_running_at_s", "first_lines_s")}
        head[tag]["health_changes"] = (st.get("health") or {}).get("changes")
    run.summary["headline"] = head


def main() -> int:
    return run_script("multinode_rank1", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
