"""Real SGLang 0.5.17: NEXTN / EAGLE without --speculative-draft-model-path on checkpoints without MTP layers.

What does real SGLang do when speculative decoding is asked to take its draft from the target checkpoint and the
checkpoint has no MTP (NextN) layer? Run on the lent GPU machine, from the repository root, after the bundle is
unpacked (tests/hardware/run.sh does that):

    command: HW_DRIVER=tests/hardware/nextn_without_mtp.py bash tests/hardware/run.sh      carry: [".hardware"]

Four servers are launched at once (`python3 -m sglang.launch_server`, the common flags of the earlier recordings,
one port each, no API key), none with --speculative-draft-model-path (HW_SERVERS=tag,tag picks some of them):

  nextn_mimo_no_mtp   tiny-mimo-no-mtp (gen_tiny mimo_no_mtp: MiMoForCausalLM without `model.mtp_layers.*` and
                      without `num_nextn_predict_layers`), NEXTN 3/1/4
  eagle_mimo_no_mtp   the same checkpoint, EAGLE 3/1/4
  nextn_qwen3         tiny-qwen3 (Qwen3ForCausalLM, no MTP layer at all), NEXTN 3/1/4
  nextn_mimo_mtp      control: tiny-mimo-mtp (WITH its MTP layer, the draft that agrees), NEXTN 3/1/4

For each: the whole log (`<tag>/server.log`, each line time-stamped from launch), the /health and /health_generate
changes from launch (`<tag>/health.json`), and then either the exit (code, seconds, the error lines) or, once both
health routes answer 200: `/server_info` before and after, two greedy `/generate` requests (256 tokens, ignore_eos,
temperature 0; `meta_info` keeps `spec_accept_length`, `spec_verify_ct`, ...), `/metrics`, and SIGTERM. The figures
go into summary.json (`headline`); the layout is the one tests/contract/recordings.py reads (per-tag folders,
`stages.<tag>.sigterm`, `stages.failures.<tag>` for a launch that ends by itself).

Reuses driver.py's Run (budget, summary.json, $OUT/results.tar.gz after every stage), Server, HealthRecorder and
http. In a rehearsal without a GPU, HW_LAUNCH_MODULE=sglang_simulator starts the project's simulator instead
(tests/hardware/README.md, "A rehearsal without a GPU").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tests/hardware/driver.py as hardware.driver
from hardware import driver
from hardware.driver import PY, TIMELINE, HealthRecorder, Json, Run, Server, http, sh

HERE = Path(__file__).resolve().parent
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--disable-cuda-graph", "--mem-fraction-static", "0.1", "--context-length", "2048", "--enable-metrics",
]
SPEC = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
MODELS = (("mimo_no_mtp", "tiny-mimo-no-mtp"), ("qwen3", "tiny-qwen3"), ("mimo_mtp_agree", "tiny-mimo-mtp"))
# tag: (model directory, algorithm, port)
SERVERS = {
    "nextn_mimo_no_mtp": ("tiny-mimo-no-mtp", "NEXTN", 30000),
    "eagle_mimo_no_mtp": ("tiny-mimo-no-mtp", "EAGLE", 30001),
    "nextn_qwen3": ("tiny-qwen3", "NEXTN", 30002),
    "nextn_mimo_mtp": ("tiny-mimo-mtp", "NEXTN", 30003),
}
PROMPTS = ("sglang-fleet rollout probe:", "The quick brown fox jumps over the lazy dog.")
TOKENS = 256
READY_S = 300.0
META_KEYS = ("completion_tokens", "prompt_tokens", "spec_accept_length", "spec_accept_rate", "spec_verify_ct",
             "spec_accept_token_num", "spec_draft_token_num", "e2e_latency", "finish_reason")
ACCEPT_LINE = re.compile(r"accept len: ([\d.]+), accept rate: ([\d.]+)")
ERROR_LINE = re.compile(r"^(\w+(Error|Exception)|sglang serve: error): ")


def selected() -> dict[str, tuple[str, str, int]]:
    """SERVERS, or those named in HW_SERVERS (comma-separated tags): servers started at once share the GPU, and one
    whose KV cache is sized while another allocates can fail on memory (the first run's EAGLE server did)."""
    names = [n for n in os.environ.get("HW_SERVERS", "").split(",") if n]
    unknown = [n for n in names if n not in SERVERS]
    if unknown:
        raise SystemExit(f"HW_SERVERS: unknown tag(s) {unknown}; known: {', '.join(SERVERS)}")
    return {tag: SERVERS[tag] for tag in names} if names else dict(SERVERS)


def argv_for(models: Path, model: str, algorithm: str, port: int) -> list[str]:
    return ["--model-path", str(models / model), "--served-model-name", model,
            "--speculative-algorithm", algorithm, *SPEC, *COMMON,
            "--host", "127.0.0.1", "--port", str(port), "--nccl-port", str(port + 1000)]


JIT_KERNELS = 8  # prebuild_jit.py's list


def start_jit(run: Run) -> list[tuple[int, subprocess.Popen[str]]]:
    """SGLang's tvm-ffi JIT kernels for sm_90a, one prebuild_jit.py process per kernel, in the background (the
    bundle carries no prebuilt ones this time); a kernel the list misses still compiles in the first server."""
    if driver.LAUNCH_MODULE != "sglang.launch_server" or os.environ.get("HW_SKIP_JIT"):
        return []
    procs = []
    for index in range(JIT_KERNELS):
        p = subprocess.Popen([PY, str(HERE / "prebuild_jit.py"), str(index)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        run.procs.append(p)  # type: ignore[arg-type]
        procs.append((index, p))
    return procs


def finish_jit(procs: list[tuple[int, subprocess.Popen[str]]], record: Json, timeout: float) -> None:
    deadline = time.time() + timeout
    for index, p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.time()))
            record[str(index)] = {"returncode": p.returncode, "lines": [
                line for line in out.splitlines() if line.startswith("[prebuild_jit]")]}
        except subprocess.TimeoutExpired:
            p.kill()
            record[str(index)] = {"returncode": None, "timeout": True}


def stage_models(run: Run, models: Path, record: Json) -> None:
    argv = [PY, str(HERE / "gen_tiny.py")] + [word for arch, name in MODELS for word in (arch, str(models / name))]
    rec = sh(run, "models/gen_tiny", argv, timeout=180)
    record["returncode"] = rec["returncode"]
    if rec["returncode"] != 0:
        raise RuntimeError(f"gen_tiny.py failed: {(rec.get('stderr') or '')[-800:]}")
    listing: Json = {}
    for _, name in MODELS:
        directory = models / name
        config = (directory / "config.json").read_text()
        index = (directory / "model.safetensors.index.json").read_text()
        listing[name] = {"files": sorted(p.name for p in directory.iterdir()), "config.json": config,
                         "model.safetensors.index.json": index}
    run.save("models/listing.json", listing)


def wait_ready_or_exit(servers: dict[str, tuple[Server, HealthRecorder]], run: Run, deadline: float) -> None:
    """Until every server is ready (both health routes answered 200) or has exited, or the deadline passes."""
    while time.time() < deadline and run.left() > 30:
        pending = [tag for tag, (server, health) in servers.items()
                   if server.p.poll() is None and len(health.first_200) < 2]
        if not pending:
            return
        time.sleep(1.0)


def json_body(rec: Json) -> Json:
    body = rec.get("body")
    return body if isinstance(body, dict) else {}


def exchange_and_record(run: Run, tag: str, port: int, record: Json) -> None:
    """A ready server: /server_info, two greedy generations, /server_info again, /metrics."""
    url = f"http://127.0.0.1:{port}"
    before = http(f"{url}/server_info", timeout=60)
    run.save(f"{tag}/server_info.before.json", before)
    generations = []
    for index, prompt in enumerate(PROMPTS, 1):
        payload = {"text": prompt,
                   "sampling_params": {"max_new_tokens": TOKENS, "temperature": 0, "ignore_eos": True}}
        rec = http(f"{url}/generate", payload, timeout=180)
        run.save(f"{tag}/generate.greedy{TOKENS}.{index}.json", rec)
        body = json_body(rec)
        meta = body.get("meta_info") or {}
        generations.append({"status": rec.get("status"), "seconds": rec.get("seconds"),
                            "text_head": str(body.get("text", ""))[:80],
                            **{k: meta.get(k) for k in META_KEYS if k in meta}})
    record["generations"] = generations
    time.sleep(1.0)
    after = http(f"{url}/server_info", timeout=60)
    run.save(f"{tag}/server_info.after.json", after)
    for stage, rec in (("before", before), ("after", after)):
        body = json_body(rec)
        state = (body.get("internal_states") or [{}])[0]
        record[f"server_info_{stage}"] = {
            "status": rec.get("status"),
            **{k: body.get(k) for k in ("speculative_algorithm", "speculative_draft_model_path",
                                        "speculative_num_steps", "speculative_eagle_topk",
                                        "speculative_num_draft_tokens", "max_running_requests",
                                        "max_total_num_tokens")},
            "avg_spec_accept_length": state.get("avg_spec_accept_length"),
        }
    metrics = http(f"{url}/metrics", timeout=60)
    text = str(metrics.get("body_text", metrics.get("body", "")))
    run.save(f"{tag}/metrics.txt", text)
    record["metrics_spec"] = [line for line in text.splitlines()
                              if line.startswith(("sglang:spec_accept", "sglang:spec_verify"))][:12]


def finish(run: Run, tag: str, server: Server, health: HealthRecorder, record: Json, failures: Json,
           exchange: Callable[[Run, str, int, Json], None] = exchange_and_record) -> None:
    """The record of one server once the wait is over: ready (then `exchange`, SIGTERM) or exited by itself."""
    health.stop.set()
    health.join(timeout=5)
    record["health"] = health.record()
    run.save(f"{tag}/health.json", health.record())
    record["timeline_s"] = {key: server.first(rx) for key, rx in TIMELINE.items()}
    ready = len(health.first_200) == 2 and server.p.poll() is None
    record["ready"] = ready
    record["ready_after_launch_s"] = max(health.first_200.values()) if ready else None
    if ready:
        try:
            exchange(run, tag, record["port"], record)
        except Exception as error:  # keep the server's record whatever happened
            record["exchange_error"] = f"{type(error).__name__}: {error}"
        record["sigterm"] = server.sigterm()
    else:
        rc = server.p.poll()
        record["exited_by_itself"] = rc is not None
        record["seconds_to_exit"] = server.rel() if rc is not None else None
        record["returncode"] = rc if rc is not None else server.kill()
        if rc is not None:
            server.kill()  # children of the session, if any are left
        failures[tag] = {"exited_by_itself": rc is not None, "returncode": record["returncode"],
                         "seconds_to_exit": record["seconds_to_exit"]}
    lines = [line for _, line in server.lines]
    record["accept_len_lines"] = [m.group(0) for line in lines if (m := ACCEPT_LINE.search(line))][:20]
    record["error_lines"] = [line for line in lines if ERROR_LINE.match(line)][-8:]
    record["warning_lines"] = [line for line in lines if re.search(r"(?i)warn|mtp|nextn|draft", line)][:40]
    record["output_tail"] = server.tail(40)


Launch = tuple[list[str], Json]  # (argv, the stage record's fields: model, port, ...)


def serve_all(run: Run, launches: dict[str, Launch], record: Json, stagger_s: float = 0.0,
              exchange: Callable[[Run, str, int, Json], None] = exchange_and_record, scheme: str = "http") -> None:
    """Launch every server (`stagger_s` apart), wait until each is ready or has exited (its health routes asked over
    `scheme`), then record each at once (`finish`): failures in `stages.failures`, outcomes in `record`."""
    failures: Json = {}
    run.summary["stages"]["failures"] = failures
    servers: dict[str, tuple[Server, HealthRecorder]] = {}
    for tag, (argv, fields) in launches.items():
        server = Server(run, tag, argv, {})
        health = HealthRecorder(server, f"{scheme}://127.0.0.1:{fields['port']}", time.time() + READY_S)
        health.start()
        servers[tag] = (server, health)
        run.summary["stages"][tag] = {"t_start_s": run.now(), "cmd": server.cmd, **fields}
        time.sleep(stagger_s)
    wait_ready_or_exit(servers, run, time.time() + READY_S)
    record["waited_s"] = run.now()
    apps = sh(run, "servers/nvidia-smi.compute-apps", ["nvidia-smi", "--query-compute-apps=pid,used_memory,process_name",
                                                       "--format=csv,noheader,nounits"], timeout=30)
    record["compute_apps"] = apps.get("stdout")
    threads = [threading.Thread(target=finish, args=(run, tag, server, health, run.summary["stages"][tag], failures,
                                                     exchange)) for tag, (server, health) in servers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(30.0, run.left() - 20))
    record["outcomes"] = {tag: ("ready" if run.summary["stages"][tag].get("ready") else
                                f"exit {run.summary['stages'][tag].get('returncode')}") for tag in servers}


def stage_servers(run: Run, models: Path, record: Json) -> None:
    serve_all(run, {tag: (argv_for(models, model, algorithm, port), {"model": model, "algorithm": algorithm,
                                                                      "port": port})
                    for tag, (model, algorithm, port) in selected().items()}, record)


def server_headline(st: Json) -> Json:
    """One server's figures for the headline: ready or its exit, accept lengths, SIGTERM."""
    return {
        "ready": st.get("ready"),
        "ready_after_launch_s": st.get("ready_after_launch_s"),
        "returncode": st.get("returncode"),
        "seconds_to_exit": st.get("seconds_to_exit"),
        "error_lines": st.get("error_lines"),
        "spec_accept_length": [g.get("spec_accept_length") for g in st.get("generations") or []],
        "avg_spec_accept_length": (st.get("server_info_after") or {}).get("avg_spec_accept_length"),
        "sigterm_returncode": (st.get("sigterm") or {}).get("returncode"),
    }


def headline(run: Run) -> None:
    head: Json = {}
    for tag in selected():
        st: Json = run.summary["stages"].get(tag) or {}
        after = st.get("server_info_after") or {}
        head[tag] = {**server_headline(st), "speculative_algorithm": after.get("speculative_algorithm"),
                     "speculative_draft_model_path": after.get("speculative_draft_model_path")}
    run.summary["headline"] = head


def run_script(script: str, models_stage: Callable[[Run, Path, Json], None],
               servers_stage: Callable[[Run, Path, Json], None], summarize: Callable[[Run], None]) -> int:
    """One recording script's whole run on the GPU machine: the models, the environment, the JIT kernels, the
    servers, each a stage of its own, and `summarize` as the headline however it ends."""
    ap = argparse.ArgumentParser(description=f"tests/hardware/{script}.py")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET_S", "520")))
    ap.add_argument("--res", type=Path, default=Path(os.environ.get("HW_RES", "/tmp/hw-results")))
    ap.add_argument("--models", type=Path, default=Path("/tmp/hw-models"))
    args = ap.parse_args()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    run = Run(args.res, out, args.budget, float(os.environ.get("T0") or time.time()))
    run.summary["script"] = f"tests/hardware/{script}.py"
    os.environ.update(driver.MANDATORY_ENV)
    try:
        run.log(f"{script} start; budget {run.left():.0f} s left; python {sys.version.split()[0]}")
        jit = start_jit(run)
        with run.stage("models") as record:
            models_stage(run, args.models, record)
        with run.stage("env") as record:
            driver.stage_env(run, record)
        with run.stage("jit", skip="" if jit else "no prebuild (a rehearsal, or HW_SKIP_JIT)") as record:
            if "skipped" not in record:
                finish_jit(jit, record, timeout=min(150.0, max(10.0, run.left() - 330)))
        with run.stage("servers", needs_s=120) as record:
            if "skipped" not in record:
                servers_stage(run, args.models, record)
        ok = all((run.summary["stages"].get(name) or {}).get("ok") for name in ("models", "servers"))
        return 0 if ok else 1
    finally:
        driver.finish(run, summarize)


def main() -> int:
    return run_script("nextn_without_mtp", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
