"""A live simulator on an ephemeral 127.0.0.1 port."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .simkit import Env, Server

Start = Callable[..., Server]
SPEC = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"]
SPEC += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"]


def _sse(body: bytes) -> list[Any]:
    events = [line[len("data: ") :] for line in body.decode().split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_phases_and_endpoints(start_server: Start, model_dir: Path, sim_env: Env) -> None:
    server = start_server(
        ["--model-path", str(model_dir), "--tp-size", "2", *SPEC, "--enable-metrics"],
        SGLANG_SIM_WARMUP_SECONDS="1",
    )
    server.wait_listening()
    assert server.get("/health").status == 503  # warming up
    assert server.get("/ready").status == 503
    state = json.loads((sim_env.state_dir / f"gpu-{server.proc.pid}.json").read_text())
    assert state["pid"] == server.proc.pid and len(state["gpu_uuids"]) == 2 and state["used_mib"] > 0
    server.wait_ready()
    assert server.get("/health_generate").status == 200
    assert server.get("/ready").status == 200

    models = server.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == str(model_dir)
    info = server.get("/model_info").json()
    assert info["architectures"] == ["Qwen3_5ForConditionalGeneration"] and info["is_generation"] is True
    assert server.get("/get_model_info").json() == info

    gen = server.get(
        "/generate", method="POST", body={"text": "Hello", "sampling_params": {"max_new_tokens": 16}}
    )
    assert gen.status == 200
    out = gen.json()
    assert out["meta_info"]["completion_tokens"] == 16 and len(out["output_ids"]) == 16
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
    assert out["meta_info"]["spec_accept_length"] > 1.0
    again = server.get(
        "/generate", method="POST", body={"text": "Hello", "sampling_params": {"max_new_tokens": 16}}
    )
    assert again.json()["text"] == out["text"]  # deterministic

    chat = server.get(
        "/v1/chat/completions",
        method="POST",
        body={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["choices"][0]["finish_reason"] == "stop" and chat["usage"]["completion_tokens"] > 0

    streamed = server.get(
        "/v1/chat/completions",
        method="POST",
        body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True},
    )
    chunks = _sse(streamed.body)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks).strip()

    completion = server.get("/v1/completions", method="POST", body={"prompt": "x", "max_tokens": 3}).json()
    assert completion["object"] == "text_completion" and completion["usage"]["completion_tokens"] == 3

    metrics = server.get("/metrics").body.decode()
    for name in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "spec_accept_length"):
        assert f"sglang:{name}{{" in metrics
    assert 'sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="' in metrics
    assert "sglang:prompt_tokens_total{" in metrics

    server_info = server.get("/server_info").json()
    assert server_info["speculative_algorithm"] == "EAGLE"
    assert (server_info["speculative_num_steps"], server_info["speculative_num_draft_tokens"]) == (1, 2)
    assert server_info["tp_size"] == 2 and server_info["port"] == server.port
    assert (
        server_info["version"] == "0.5.23"
        and "--speculative-algorithm NEXTN" in server_info["launch_command"]
    )
    assert server.get("/get_server_info").status == 200
    assert server.get("/nope").status == 404 and server.get("/generate").status == 405

    stderr = server.stop()
    assert server.proc.returncode == -9  # like real SGLang: SIGTERM ends in kill_process_tree's SIGKILL
    assert not (sim_env.state_dir / f"gpu-{server.proc.pid}.json").exists()
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in stderr
    assert "The server is fired up and ready to roll!" in stderr
    assert "server_args={" in stderr


def test_accept_length_appears_after_decode_log_interval(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir), *SPEC, "--skip-server-warmup"])
    server.wait_ready()
    state = server.get("/server_info").json()["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    server.get("/generate", method="POST", body={"text": "x", "sampling_params": {"max_new_tokens": 100}})
    state = server.get("/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1.0


def test_api_key(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir), "--api-key", "sk-sim", "--enable-metrics"])
    server.wait_ready()  # /health is exempt
    assert server.get("/metrics").status == 200  # exempt
    assert server.get("/v1/models").status == 401
    assert server.get("/v1/models").json() == {"error": "Unauthorized"}
    assert server.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status == 401
    auth = {"Authorization": "bearer sk-sim"}
    assert server.get("/v1/models", headers=auth).status == 200
    assert server.get("/server_info", headers=auth).json()["api_key"] == "sk-sim"
    assert server.get("/ready").status == 200  # exempt in 0.5.23


def test_api_key_0_5_17(start_server: Start, model_dir: Path) -> None:
    """As recorded in tests/recordings/sglang-0.5.17-h200-keyed-routes: 0.5.17 has no /ready and exempts
    only /health* and /metrics*; a refused request is in no HTTP counter; a CORS preflight needs no key."""
    server = start_server(
        ["--model-path", str(model_dir), "--api-key", "sk-sim", "--enable-metrics"],
        SGLANG_SIM_VERSION="0.5.17",
    )
    server.wait_ready()
    auth = {"Authorization": "Bearer sk-sim"}
    assert server.get("/ready").status == 401
    assert server.get("/ready").json() == {"error": "Unauthorized"}
    assert server.get("/ready", headers=auth).status == 404
    assert server.get("/metrics").status == 200
    counted = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in server.get("/metrics").body.decode().splitlines()
        if line.startswith(("sglang:http_requests_total", "sglang:http_responses_total")) and "/ready" in line
    }
    assert counted == {
        'sglang:http_requests_total{endpoint="/ready",method="GET"}': 1.0,
        'sglang:http_responses_total{endpoint="/ready",method="GET",status_code="404"}': 1.0,
    }
    preflight = {"Origin": "http://x.example", "Access-Control-Request-Method": "GET"}
    answer = server.get(
        "/v1/models",
        method="OPTIONS",
        headers={**preflight, "Access-Control-Request-Headers": "authorization"},
    )
    assert answer.status == 200 and answer.body == b"OK"
    assert answer.headers["Access-Control-Allow-Origin"] == "http://x.example"
    assert answer.headers["Access-Control-Allow-Headers"] == "authorization"
    assert answer.headers["Access-Control-Allow-Credentials"] == "true"
    refused = server.get(
        "/v1/models", method="OPTIONS", headers={**preflight, "Access-Control-Request-Method": "FOO"}
    )
    assert refused.status == 400 and refused.body == b"Disallowed CORS method"
    plain = server.get("/v1/models", method="OPTIONS")
    assert (
        plain.status == 405
        and plain.json() == {"detail": "Method Not Allowed"}
        and plain.headers["Allow"] == "GET"
    )


def test_ignore_speculative_knob(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir), *SPEC], SGLANG_SIM_IGNORE_SPECULATIVE="1")
    server.wait_ready()
    server.get("/generate", method="POST", body={"text": "x", "sampling_params": {"max_new_tokens": 64}})
    info = server.get("/server_info").json()
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]


def test_die_after_knob(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir)], SGLANG_SIM_DIE_AFTER_SECONDS="0.3")
    server.wait_ready()
    assert server.proc.wait(timeout=10) == -9
    stderr = server.stop()
    assert "simulated crash" in stderr and "Sleeping 5 seconds before crash diagnostics" in stderr


def test_fail_at_start_knob(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir)], SGLANG_SIM_FAIL_AT_START="NCCL error: unhandled")
    assert server.proc.wait(timeout=10) == -9
    stderr = server.stop()
    assert "Scheduler hit an exception: Traceback" in stderr
    assert "\nRuntimeError: NCCL error: unhandled" in stderr
    assert "Received sigquit from a child process. It usually means the child failed." in stderr


def test_hang_loading_knob_never_listens(start_server: Start, model_dir: Path, sim_env: Env) -> None:
    server = start_server(["--model-path", str(model_dir)], SGLANG_SIM_HANG_LOADING="1")
    record = sim_env.state_dir / f"gpu-{server.proc.pid}.json"
    deadline = time.monotonic() + 10
    while not record.exists() and time.monotonic() < deadline and server.proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    assert server.proc.poll() is None
    assert record.exists()
    server.stop(signal.SIGTERM)
    assert server.proc.returncode == 0
    assert not (sim_env.state_dir / f"gpu-{server.proc.pid}.json").exists()


def test_retired_environment_warning(start_server: Start, model_dir: Path) -> None:
    server = start_server(
        ["--model-path", str(model_dir), "--skip-server-warmup"],
        SGLANG_ENABLE_SPEC_V2="1",
        SGLANG_TYPO_FLAG="1",
    )
    server.wait_ready()
    stderr = server.stop()
    warning = [line for line in stderr.splitlines() if "does not read these environment variables" in line]
    assert len(warning) == 1
    assert "SGLANG_ENABLE_SPEC_V2 (retired)" in warning[0] and "SGLANG_TYPO_FLAG (unknown)" in warning[0]


def test_port_in_use_fails_after_loading(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir)])
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", server.port))
        blocker.listen()
        assert server.proc.wait(timeout=10) == 1
    stderr = server.stop()
    assert "Load weight end." in stderr and "error while attempting to bind on address" in stderr
