"""Real SGLang 0.5.17 on one H200: cold vs warm start, in-place weight update vs restart, and a node rank with its peer
missing (issues 42 and 43). Run from the repository root, after the bundle is unpacked:

    command: BUDGET_S=540 HW_DRIVER=tests/hardware/restarts.py bash tests/hardware/run.sh   carry: [".hardware"]

Stages (each recorded under its own folder of results.tar.gz):

- `models`: the sandbox's model (tests/fixtures/model_repo.py) at revision 1 and revision 2 (one shard differs; the
  recording of 2026-12-05 was made while revision 2 also changed generation_config.json), and `broken`: revision 2
  with its changed shard cut to half its bytes.
- `multinode.tp2` and `multinode.tp1`, launched first and left running beside the rest: ct129's settings plus
  `--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:<port> --dist-timeout 60` (tp 2 over two nodes of one GPU, and
  tp 1), node 1 never started; their logs, exit status and seconds to exit (issue 43).
- `cold`: ct129's settings (NEXTN) and the machine's flags of sandbox_model.py, with every kernel and compile cache
  (tvm-ffi, Triton, flashinfer, deep_gemm, torch inductor, SGLang's own) pointed at an empty directory; time to ready
  (both health routes 200), `/metrics` (start-up gauges). Then on that server: `/model_info`, a greedy probe,
  `/update_weights_from_disk` to revision 2 with `weight_version: "rev2"` (timed), `/model_info`, the probe again,
  `/metrics` (weight_load_duration_seconds), the update with a missing path, with the broken copy, `/model_info`
  and the probe after each failure, back to revision 1 (`weight_version: "rev1"`), the probe; SIGTERM (timed).
- `warm`: the same launch on the same, now filled, cache directory: time to ready, `/metrics`, SIGTERM. A restart
  costs SIGTERM + warm start; the in-place update costs the update's seconds.
- `graphs`: as `warm` without `--disable-cuda-graph` (`--cuda-graph-max-bs 8`): what CUDA graph capture adds and
  what `sglang:startup_cuda_graph_time_seconds` reports.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hardware.*, fixtures.*
from fixtures import model_repo
from hardware.driver import HealthRecorder, Json, Run, Server, http
from hardware.nextn_without_mtp import run_script
from hardware.sandbox_model import CONTROL, CT129, MODEL, argv_for

VARIANT = os.environ.get("HW_RESTARTS", "")
REV2 = f"{MODEL}-rev2"
BROKEN = f"{MODEL}-broken"
PORT = 30000
CACHE_ENV = {  # variable -> folder under a run's cache directory
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "SGLANG_CACHE_DIR": "sglang",
    "SGLANG_JIT_CACHE_DIR": "sglang-jit",
    "XDG_CACHE_HOME": "xdg",
}
CACHES = Path("/tmp/hw-persistent-cache")
PROBE = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 32, "temperature": 0}}
STARTUP_PREFIXES = ("sglang:startup_", "sglang:weight_load_duration_seconds", "sglang:weight_memory_usage_gb")


def stage_models(run: Run, models: Path, record: Json) -> None:
    for name, revision in ((MODEL, 1), (REV2, 2), (BROKEN, 2)):
        model_repo.build_repo(models / name, revision)
    shard = models / BROKEN / model_repo.SHARDS[1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    record["broken_shard"] = {"name": shard.name, "bytes_kept": len(data) // 2, "bytes_whole": len(data)}
    record["files"] = {name: sorted(p.name for p in (models / name).iterdir()) for name in (MODEL, REV2, BROKEN)}


def cache_env(cache: Path) -> dict[str, str]:
    env = {}
    for variable, folder in CACHE_ENV.items():
        (cache / folder).mkdir(parents=True, exist_ok=True)
        env[variable] = str(cache / folder)
    return env


def start(run: Run, tag: str, argv: list[str], env: dict[str, str], port: int, ready_s: float) -> tuple[Server, HealthRecorder]:
    server = Server(run, tag, argv, env)
    health = HealthRecorder(server, f"http://127.0.0.1:{port}", time.time() + ready_s)
    health.start()
    return server, health


def wait_ready(run: Run, server: Server, health: HealthRecorder, record: Json, ready_s: float) -> bool:
    deadline = time.time() + ready_s
    while time.time() < deadline and run.left() > 20 and server.p.poll() is None and len(health.first_200) < 2:
        time.sleep(0.25)
    health.stop.set()
    health.join(timeout=5)
    ready = len(health.first_200) == 2 and server.p.poll() is None
    record["ready"] = ready
    record["ready_after_launch_s"] = max(health.first_200.values()) if ready else None
    record["health"] = health.record()
    record["returncode"] = server.p.poll()
    if not ready:
        record["output_tail"] = server.tail(60)
    return ready


def metrics(run: Run, tag: str, name: str, record: Json) -> None:
    rec = http(f"http://127.0.0.1:{PORT}/metrics", timeout=60)
    text = str(rec.get("body_text", rec.get("body", "")))
    run.save(f"{tag}/{name}.txt", text)
    record[name] = [line for line in text.splitlines() if line.startswith(STARTUP_PREFIXES)]


def exchange(run: Run, tag: str, name: str, path: str, payload: Json | None, record: Json, timeout: float = 180) -> Json:
    rec = http(f"http://127.0.0.1:{PORT}{path}", payload, timeout=timeout)
    run.save(f"{tag}/{name}.json", rec)
    body = rec.get("body")
    brief: Json = {"status": rec.get("status"), "seconds": rec.get("seconds")}
    if isinstance(body, dict):
        if path == "/generate":
            meta = body.get("meta_info") or {}
            brief.update(
                text=body.get("text"),
                weight_version=meta.get("weight_version"),
                spec_accept_length=meta.get("spec_accept_length"),
            )
        elif path in ("/model_info", "/server_info"):
            brief["weight_version"] = body.get("weight_version")
        else:
            brief["body"] = body
    else:
        brief["body_text"] = str(rec.get("body_text", body))[:400]
    record.setdefault("exchanges", {})[name] = brief
    run.log(f"{tag}: {name}: {brief}")
    return rec


def update_cycle(run: Run, tag: str, models: Path, record: Json) -> None:
    """In-place weight updates on a ready server: success, two failures, back to revision 1 (HW_RESTARTS=control:
    success, back to revision 1, the missing path)."""
    exchange(run, tag, "model_info.before", "/model_info", None, record)
    exchange(run, tag, "server_info.before", "/server_info", None, record)
    exchange(run, tag, "generate.rev1", "/generate", PROBE, record)
    steps = [
        ("update.rev2", {"model_path": str(models / REV2), "weight_version": "rev2"}),
        ("update.missing_path", {"model_path": str(models / "no-such-model"), "weight_version": "rev3"}),
        ("update.broken_shard", {"model_path": str(models / BROKEN), "weight_version": "rev3"}),
        ("update.rev1", {"model_path": str(models / MODEL), "weight_version": "rev1"}),
    ]
    if VARIANT == "control":
        steps = [steps[0], steps[3], steps[1]]
    for name, payload in steps:
        exchange(run, tag, name, "/update_weights_from_disk", payload, record, timeout=240)
        exchange(run, tag, f"model_info.after_{name}", "/model_info", None, record)
        exchange(run, tag, f"generate.after_{name}", "/generate", PROBE, record)
        metrics(run, tag, f"metrics.after_{name}", record)
        if server_gone(record):
            return
    exchange(run, tag, "server_info.after", "/server_info", None, record)


def server_gone(record: Json) -> bool:
    last = list(record.get("exchanges", {}).values())[-1]
    return last.get("status") in ("refused", "error")


def one_server(
    run: Run,
    models: Path,
    tag: str,
    cache: Path,
    extra: list[str],
    record: Json,
    ready_s: float,
    updates: bool = False,
    drop: tuple[str, ...] = (),
    settings: list[str] = CT129,
) -> None:
    argv = [w for w in argv_for(models, MODEL, settings, PORT) if w not in drop] + extra
    env = cache_env(cache)
    record["cache_files_before"] = sum(len(files) for _, _, files in os.walk(cache))
    record["argv"], record["env_added"] = argv, env
    server, health = start(run, tag, argv, env, PORT, ready_s)
    if wait_ready(run, server, health, record, ready_s):
        try:
            metrics(run, tag, "metrics.startup", record)
            if updates:
                update_cycle(run, tag, models, record)
        finally:
            record["sigterm"] = server.sigterm()
    else:
        server.kill()
    record["cache_files_after"] = sum(len(files) for _, _, files in os.walk(cache))
    record["cache_bytes_after"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())


def stage_control(run: Run, models: Path, record: Json) -> None:
    """HW_RESTARTS=control: the control settings (no speculative decoding, so no draft graphs, which need the
    deep_gemm the bundle lacks) with CUDA graphs, on empty caches then on the same caches; updates on the first."""
    cache = Path("/tmp/hw-persistent-cache-control")
    shutil.rmtree(cache, ignore_errors=True)
    graphs = ["--cuda-graph-max-bs", "8"]
    for tag, updates, needs in (("control_cold", True, 200), ("control_warm", False, 90)):
        with run.stage(tag, needs_s=needs) as rec:
            if "skipped" not in rec:
                one_server(run, models, tag, cache, graphs, rec, ready_s=min(300.0, run.left() - 40), updates=updates,
                           drop=("--disable-cuda-graph",), settings=CONTROL)  # fmt: skip
    record["done"] = True


def stage_servers(run: Run, models: Path, record: Json) -> None:
    if VARIANT == "control":
        stage_control(run, models, record)
        return
    shutil.rmtree(CACHES, ignore_errors=True)
    stages = run.summary["stages"]
    # issue 43: node rank 0 of 2, node 1 never started; left running beside the rest
    multinode: dict[str, Server] = {}
    for tag, tp, port in (("multinode.tp2", "2", 30100), ("multinode.tp1", "1", 30200)):
        argv = [
            *argv_for(models, MODEL, CT129, port),
            "--tp-size",
            tp,
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--dist-init-addr",
            f"127.0.0.1:{port + 50}",
            "--dist-timeout",
            "60",
        ]
        multinode[tag] = Server(run, tag, argv, cache_env(Path(f"/tmp/hw-cache-{port}")))
        stages[tag] = {"t_start_s": run.now(), "argv": argv}
    for tag, cache, extra, drop, updates, needs in (
        ("cold", CACHES, [], (), True, 200),
        ("warm", CACHES, [], (), False, 90),
        ("graphs", CACHES, ["--cuda-graph-max-bs", "8"], ("--disable-cuda-graph",), False, 90),
    ):
        with run.stage(tag, needs_s=needs) as rec:
            if "skipped" not in rec:
                one_server(run, models, tag, cache, extra, rec, ready_s=min(300.0, run.left() - 40), updates=updates, drop=drop)
    deadline = time.time() + min(150.0, max(1.0, run.left() - 25))
    for tag, server in multinode.items():
        rec = stages[tag]
        rc = server.wait_exit(max(0.1, deadline - time.time()))
        rec["returncode"] = rc
        rec["exited_by_itself"] = rc is not None
        rec["seconds_to_exit"] = server.rel() if rc is not None else None
        rec["still_running_at_s"] = None if rc is not None else server.rel()
        if rc is None:
            rec["killed_returncode"] = server.kill()
        else:
            server.kill()
        rec["output_tail"] = server.tail(80)
    record["done"] = True


def headline(run: Run) -> None:
    stages = run.summary["stages"]
    head: Json = {}
    for tag in ("control_cold", "control_warm") if VARIANT == "control" else ("cold", "warm", "graphs"):
        st = stages.get(tag) or {}
        head[tag] = {
            "ready_after_launch_s": st.get("ready_after_launch_s"),
            "sigterm_s": (st.get("sigterm") or {}).get("exited_after_s"),
            "startup_metrics": st.get("metrics.startup"),
            "cache_files": [st.get("cache_files_before"), st.get("cache_files_after")],
        }
    cold = stages.get("control_cold" if VARIANT == "control" else "cold") or {}
    head["updates"] = {
        name: {k: v for k, v in ex.items() if k in ("status", "seconds", "body", "weight_version", "text")}
        for name, ex in (cold.get("exchanges") or {}).items()
    }
    for tag in ("multinode.tp2", "multinode.tp1"):
        st = stages.get(tag) or {}
        head[tag] = {k: st.get(k) for k in ("returncode", "seconds_to_exit", "still_running_at_s")}
    run.summary["headline"] = head


def main() -> int:
    return run_script("restarts", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
