"""Real SGLang 0.5.17 on the sandbox's model: does it load what the mirror serves, as ct129 and b200 launch it?

The sandbox's hosts serve tests/fixtures/model_repo.py's generated repository (Qwen3_5ForConditionalGeneration at
toy sizes, MTP layer included), fetched from the mirror. This run generates the same files (revision 1) on the lent
GPU machine and launches real SGLang on them. Run from the repository root, after the bundle is unpacked:

    command: HW_DRIVER=tests/hardware/sandbox_model.py bash tests/hardware/run.sh      carry: [".hardware"]

Servers, all at once (`python3 -m sglang.launch_server`, one port each, no API key; HW_SERVERS=tag,tag picks some):

  ct129               the repository, ct129's settings (inventory/sandbox/host_vars/ct129.yml, on one GPU: NEXTN
                      1/1/2, --dtype bfloat16, --trust-remote-code)
  b200                the repository, b200's (EAGLE 3/1/4, 512 running requests, context 8192, mamba radix cache
                      extra_buffer, hierarchical cache of 2 GB, qwen3 reasoning parser, qwen3_coder tool parser)
  control             the repository, no speculative decoding
  no_processor        the repository without preprocessor_config.json and video_preprocessor_config.json, as ct129
  no_video_processor  without video_preprocessor_config.json only, as ct129
  no_chat_template    without chat_template.jinja, as ct129

Every launch adds what every earlier recording on this machine added (triton attention, no CUDA graphs: the bundle
carries no deep_gemm, a small --mem-fraction-static so six servers share the GPU). For a server that becomes ready:
/server_info before and after, two greedy 256-token /generate requests, a greedy chat completion (the chat template
and, on b200, the reasoning parser), /v1/models and /metrics, then SIGTERM. For one that exits by itself: its exit code
and error lines. models/listing.json holds each generated directory's file names and the text of every file but the
shards, so tests/contract rebuilds the directories real SGLang saw.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hardware.*, fixtures.*
from fixtures import model_repo
from hardware.driver import Json, Run, http
from hardware.nextn_without_mtp import exchange_and_record, run_script, serve_all, server_headline

MODEL = "tiny-qwen3.5"
# directory name -> the generated files it lacks
MODELS = {
    MODEL: (),
    f"{MODEL}-no-processor": ("preprocessor_config.json", "video_preprocessor_config.json"),
    f"{MODEL}-no-video-processor": ("video_preprocessor_config.json",),
    f"{MODEL}-no-chat-template": ("chat_template.jinja",),
}
MACHINE = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--disable-cuda-graph", "--mem-fraction-static", "0.08", "--max-total-tokens", "65536",
    "--max-mamba-cache-size", "256", "--enable-metrics",
]
CT129 = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "2", "--dtype", "bfloat16", "--trust-remote-code"]
B200 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--max-running-requests", "512", "--context-length", "8192",
        "--mamba-radix-cache-strategy", "extra_buffer", "--enable-hierarchical-cache", "--hicache-size", "2",
        "--cuda-graph-max-bs-decode", "512", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder",
        "--trust-remote-code"]
CONTROL = ["--dtype", "bfloat16", "--trust-remote-code"]
# tag: (model directory, settings, port)
SERVERS: dict[str, tuple[str, list[str], int]] = {
    "ct129": (MODEL, CT129, 30000),
    "b200": (MODEL, B200, 30010),
    "control": (MODEL, CONTROL, 30020),
    "no_processor": (f"{MODEL}-no-processor", CT129, 30030),
    "no_video_processor": (f"{MODEL}-no-video-processor", CT129, 30040),
    "no_chat_template": (f"{MODEL}-no-chat-template", CT129, 30050),
}
READY_S = 300.0
CHAT = {"model": model_repo.REPO_ID, "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 64, "temperature": 0}


def selected() -> dict[str, tuple[str, list[str], int]]:
    names = [n for n in os.environ.get("HW_SERVERS", "").split(",") if n]
    unknown = [n for n in names if n not in SERVERS]
    if unknown:
        raise SystemExit(f"HW_SERVERS: unknown tag(s) {unknown}; known: {', '.join(SERVERS)}")
    return {tag: SERVERS[tag] for tag in names} if names else dict(SERVERS)


def argv_for(models: Path, model: str, settings: list[str], port: int) -> list[str]:
    return ["--model-path", str(models / model), "--served-model-name", model_repo.REPO_ID, *settings, *MACHINE,
            "--host", "127.0.0.1", "--port", str(port), "--nccl-port", str(port + 1000)]


def stage_models(run: Run, models: Path, record: Json, variants: dict[str, tuple[str, ...]] | None = None) -> None:
    """Revision 1 of the generated repository, whole and with files left out (`variants`, MODELS unless given: directory
    name -> the files it lacks); the listing of each."""
    listing: Json = {}
    for name, missing in (MODELS if variants is None else variants).items():
        directory = models / name
        model_repo.build_repo(directory, 1)
        for file in missing:
            (directory / file).unlink()
        files = sorted(p.name for p in directory.iterdir())
        listing[name] = {"files": files, **{file: (directory / file).read_text() for file in files
                                            if not file.endswith(".safetensors")}}
    record["files"] = {name: entry["files"] for name, entry in listing.items()}
    run.save("models/listing.json", listing)


def exchange(run: Run, tag: str, port: int, record: Json) -> None:
    """nextn_without_mtp's exchanges (server_info, two greedy /generate, metrics), then a chat completion and
    /v1/models."""
    exchange_and_record(run, tag, port, record)
    url = f"http://127.0.0.1:{port}"
    chat = http(f"{url}/v1/chat/completions", CHAT, timeout=120)
    run.save(f"{tag}/v1_chat_completions.json", chat)
    body: Json = chat["body"] if isinstance(chat.get("body"), dict) else {}
    message = ((body.get("choices") or [{}])[0]).get("message") or {}
    record["chat"] = {"status": chat.get("status"), "content_head": str(message.get("content"))[:80],
                      "reasoning_head": str(message.get("reasoning_content"))[:80], "usage": body.get("usage")}
    run.save(f"{tag}/v1_models.json", http(f"{url}/v1/models", timeout=30))


def stage_servers(run: Run, models: Path, record: Json) -> None:
    """Launched 2 s apart: KV caches are sized one after another."""
    serve_all(run, {tag: (argv_for(models, model, settings, port), {"model": model, "port": port})
                    for tag, (model, settings, port) in selected().items()}, record, stagger_s=2.0, exchange=exchange)


def headline(run: Run) -> None:
    head: Json = {}
    for tag in selected():
        st: Json = run.summary["stages"].get(tag) or {}
        head[tag] = {**server_headline(st), "text_head": [g.get("text_head") for g in st.get("generations") or []],
                     "max_total_num_tokens": (st.get("server_info_after") or {}).get("max_total_num_tokens"),
                     "chat": st.get("chat")}
    run.summary["headline"] = head


def main() -> int:
    return run_script("sandbox_model", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
