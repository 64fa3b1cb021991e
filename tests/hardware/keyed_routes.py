"""Real SGLang 0.5.17 with --api-key: which HTTP routes answer without the key?

SGLang's srt/utils/auth.py (`decide_request_auth`) lets OPTIONS and every path starting with /health or /metrics
through without a key and asks every other route for `Authorization: Bearer <api_key>`; Prometheus scrapes /metrics
with no bearer token. This run records what a real server answers. Run from the repository root, after the bundle is
unpacked:

    command: BUDGET_S=380 HW_DRIVER=tests/hardware/keyed_routes.py bash tests/hardware/run.sh   carry: [".hardware"]

One server (`python3 -m sglang.launch_server`): the sandbox's model (tests/fixtures/model_repo.py, revision 1, made
as tests/hardware/sandbox_model.py makes it), ct129's settings and the machine's flags of sandbox_model.py
(`--enable-metrics` among them), plus `--api-key <key>`, the key random per run. Once /health and /health_generate
answer 200 (they need no key: that is how the wait sees it), every route of ROUTES is asked three times: without an
Authorization header, with `Bearer <wrong key>`, and with `Bearer <key>`; each answer (status, headers, body; a body
over BODY_CHARS characters cut to that, /metrics kept whole) goes into `keyed/routes.json`, then SIGTERM. The key is in
nothing saved: Run.save, Run.log and the server's log write '<redacted>' for it (the log's `# cmd:` line too, which
tests/contract/test_keyed_routes.py replays with a key of its own), and `/server_info` echoes it as `api_key` to a
client that sends it (`server_info_echoes_key` records whether it did).

Reuses nextn_without_mtp.py's run_script and serve_all (Run, Server, HealthRecorder, http of driver.py) and
sandbox_model.py's model stage and flags. In a rehearsal without a GPU, HW_LAUNCH_MODULE=sglang_simulator starts the
project's simulator instead (tests/hardware/README.md, "A rehearsal without a GPU").
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hardware.*, fixtures.*
from fixtures import model_repo
from hardware.driver import Json, Run, http
from hardware.nextn_without_mtp import run_script, serve_all, server_headline
from hardware.sandbox_model import CT129, MODEL, argv_for
from hardware.sandbox_model import stage_models as sandbox_models

TAG = "keyed"
PORT = 30000
KEY = "sk-hw-" + secrets.token_hex(16)
WRONG_KEY = "sk-hw-wrong-" + secrets.token_hex(8)
BODY_CHARS = 4096
PREFLIGHT = {
    "Origin": "http://prometheus.example",
    "Access-Control-Request-Method": "GET",
    "Access-Control-Request-Headers": "authorization",
}
# name: (method, path, payload, extra headers)
ROUTES: dict[str, tuple[str, str, Any, dict[str, str]]] = {
    "GET /health": ("GET", "/health", None, {}),
    "GET /health_generate": ("GET", "/health_generate", None, {}),
    "GET /ready": ("GET", "/ready", None, {}),
    "GET /metrics": ("GET", "/metrics", None, {}),
    "GET /model_info": ("GET", "/model_info", None, {}),
    "GET /server_info": ("GET", "/server_info", None, {}),
    "GET /v1/models": ("GET", "/v1/models", None, {}),
    "POST /generate": (
        "POST",
        "/generate",
        {"text": "sglang-fleet keyed probe:", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
        {},
    ),
    "POST /v1/chat/completions": (
        "POST",
        "/v1/chat/completions",
        {"model": model_repo.REPO_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0},
        {},
    ),
    "OPTIONS /v1/models": ("OPTIONS", "/v1/models", None, {}),
    "OPTIONS /v1/models (CORS preflight)": ("OPTIONS", "/v1/models", None, PREFLIGHT),
}
# how the Authorization header is sent: (label, key)
AUTHS = (("no_key", ""), ("wrong_key", WRONG_KEY), ("key", KEY))


def stage_models(run: Run, models: Path, record: Json) -> None:
    """The sandbox's repository, whole (sandbox_model.py's stage, its one complete variant)."""
    sandbox_models(run, models, record, variants={MODEL: ()})


def cut(rec: Json, whole: bool) -> Json:
    """The exchange with a long body cut to BODY_CHARS characters (as body_text, with its full length)."""
    text = rec.get("body_text")
    if "body" in rec:
        text = rec["body"] if isinstance(rec["body"], str) else json.dumps(rec["body"])
    if whole or text is None or len(text) <= BODY_CHARS:
        return rec
    out = {k: v for k, v in rec.items() if k not in ("body", "body_text")}
    return {**out, "body_text": text[:BODY_CHARS], "body_truncated": True, "body_chars": len(text)}


def exchange(run: Run, tag: str, port: int, record: Json) -> None:
    """Every route of ROUTES without a key, with a wrong one and with the key; `keyed/routes.json`."""
    url = f"http://127.0.0.1:{port}"
    routes: Json = {}
    table: Json = {}
    for name, (method, path, payload, headers) in ROUTES.items():
        routes[name] = {}
        for label, key in AUTHS:
            rec = http(url + path, payload, timeout=120, api_key=key, method=method, headers=headers)
            rec["authorization"] = {"no_key": None, "wrong_key": "Bearer <wrong key>", "key": "Bearer <key>"}[label]
            if path == "/server_info" and label == "key":
                body = rec.get("body")
                record["server_info_echoes_key"] = isinstance(body, dict) and body.get("api_key") == KEY
            routes[name][label] = cut(rec, whole=path == "/metrics")
        table[name] = {label: routes[name][label].get("status") for label, _ in AUTHS}
    run.save(f"{tag}/routes.json", {"key": "<redacted>", "routes": routes})
    record["routes"] = table
    run.log(f"{tag}: " + "; ".join(f"{name} {'/'.join(str(s) for s in st.values())}" for name, st in table.items()))


def stage_servers(run: Run, models: Path, record: Json) -> None:
    run.secrets += [KEY]
    argv = [*argv_for(models, MODEL, CT129, PORT), "--api-key", KEY]
    serve_all(run, {TAG: (argv, {"model": MODEL, "port": PORT})}, record, exchange=exchange)


def headline(run: Run) -> None:
    st: Json = run.summary["stages"].get(TAG) or {}
    run.summary["headline"] = {
        TAG: {**server_headline(st), "routes": st.get("routes"), "server_info_echoes_key": st.get("server_info_echoes_key")}
    }


def main() -> int:
    return run_script("keyed_routes", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
