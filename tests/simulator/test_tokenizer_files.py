"""A multimodal checkpoint's tokenizer directory, as real SGLang 0.5.17 needs it
(tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5): without preprocessor_config.json it exits 1 at
start, before it listens; without a chat template its warm-up chat completion gets 400 and it kills
itself; with either fixed, it serves."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from fixtures import model_repo

from .simkit import Server, make_model

Start = Callable[..., Server]
FAST = {"SGLANG_SIM_LOAD_SECONDS": "0.1", "SGLANG_SIM_WARMUP_SECONDS": "0.1"}


def test_no_image_processor_exits_1_before_listening(start_server: Start, tmp_path: Path) -> None:
    model = make_model(tmp_path / "model", processor=False)
    server = start_server(["--model-path", str(model), "--skip-tokenizer-init"], **FAST)
    assert server.proc.wait(timeout=20) == 1
    log = server.stop()
    assert f"OSError: Can't load image processor for '{model}'." in log
    assert "Load weight begin" not in log and "Uvicorn running" not in log


def test_a_tokenizer_path_with_the_processor_starts(start_server: Start, tmp_path: Path) -> None:
    model = make_model(tmp_path / "model", processor=False)
    tokenizer = make_model(tmp_path / "tokenizer")
    server = start_server(["--model-path", str(model), "--tokenizer-path", str(tokenizer)], **FAST)
    server.wait_ready(timeout=20)
    assert (
        server.get(
            "/v1/chat/completions",
            method="POST",
            body={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        ).status
        == 200
    )


def test_no_chat_template_kills_itself_after_the_warm_up(start_server: Start, tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    (model / "chat_template.jinja").unlink()
    server = start_server(["--model-path", str(model)], **FAST)
    assert server.proc.wait(timeout=20) == -signal.SIGKILL
    log = server.stop()
    assert '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request' in log
    assert "Initialization failed. warmup error: Traceback (most recent call last):" in log
    assert 'AssertionError: {"object":"error","message":"Cannot use chat template functions' in log
    assert "The server is fired up" not in log


def test_skip_tokenizer_init_warms_up_without_the_chat_template(start_server: Start, tmp_path: Path) -> None:
    model = make_model(tmp_path / "model")
    (model / "chat_template.jinja").unlink()
    server = start_server(["--model-path", str(model), "--skip-tokenizer-init"], **FAST)
    server.wait_ready(timeout=20)
    refused = server.get(
        "/v1/chat/completions",
        method="POST",
        body={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    assert refused.status == 400 and refused.json()["type"] == "BadRequest"


def test_a_text_only_architecture_needs_neither(start_server: Start, tmp_path: Path) -> None:
    """No processor and no chat template: a text-only architecture loads no image processor and warms up with
    /generate, so it starts, serves and stays up."""
    model = make_model(tmp_path / "model", architecture="Qwen3ForCausalLM", processor=False)
    assert not (model / "preprocessor_config.json").exists() and not (model / "chat_template.jinja").exists()
    server = start_server(["--model-path", str(model)], **FAST)
    server.wait_ready(timeout=20)
    generated = server.get(
        "/generate", method="POST", body={"text": "Hi", "sampling_params": {"max_new_tokens": 4}}
    )
    assert generated.status == 200 and generated.json()["meta_info"]["completion_tokens"] == 4
    assert server.proc.poll() is None
    log = server.stop()
    assert "The server is fired up" in log
    assert "Can't load image processor" not in log and "warmup error" not in log


def test_the_sandbox_repository_serves_and_stops_at_its_generation_config_eos(
    start_server: Start, tmp_path: Path
) -> None:
    """The generated repository (what the sandbox serves; real SGLang served it): a chat reply that
    ends by itself matches generation_config.json's first EOS id, <|im_end|> (507), as real SGLang
    answered."""
    model_repo.build_repo(tmp_path / "model", 1)
    server = start_server(["--model-path", str(tmp_path / "model")], **FAST)
    server.wait_ready(timeout=20)
    chat = server.get(
        "/v1/chat/completions",
        method="POST",
        body={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64},
    ).json()
    assert chat["choices"][0]["finish_reason"] == "stop"
    assert chat["choices"][0]["matched_stop"] == model_repo.generation_config(1)["eos_token_id"][0] == 507
