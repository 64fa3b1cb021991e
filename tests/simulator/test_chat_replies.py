"""How a chat completion ends (matched_stop) and what the reasoning parser makes of it (a live simulator)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_simulator.engine import CHAT_REPLY_TOKENS, reply_end
from sglang_simulator.reasoning import ChatReasoning, chat_reasoning

from .simkit import Server

Start = Callable[..., Server]
EOS = 248044  # make_model's eos_token_id
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _chat(server: Server, **body: Any) -> Any:
    return server.get("/v1/chat/completions", method="POST", body={"messages": QUESTION, **body}).json()


def _stream(server: Server, **body: Any) -> list[Any]:
    answer = server.get(
        "/v1/chat/completions", method="POST", body={"messages": QUESTION, "stream": True, **body}
    )
    events = [
        line[len("data: ") :] for line in answer.body.decode().split("\n\n") if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


def test_reply_end_checks_the_length_before_the_eos() -> None:
    assert reply_end(64, CHAT_REPLY_TOKENS) == (CHAT_REPLY_TOKENS, True)
    assert reply_end(CHAT_REPLY_TOKENS, CHAT_REPLY_TOKENS) == (CHAT_REPLY_TOKENS, False)
    assert reply_end(6, CHAT_REPLY_TOKENS) == (6, False)
    assert reply_end(64, None) == (64, False)  # a plain continuation runs on
    assert reply_end(None, None) == (CHAT_REPLY_TOKENS, True)


def test_a_chat_reply_ends_with_the_eos_unless_max_tokens_comes_first(
    start_server: Start, model_dir: Path
) -> None:
    server = start_server(["--model-path", str(model_dir), "--skip-server-warmup"])
    server.wait_ready()

    choice = _chat(server, max_tokens=64)["choices"][0]
    assert (choice["finish_reason"], choice["matched_stop"]) == ("stop", EOS)  # real 0.5.17: 507, its EOS
    assert choice["message"]["content"].strip() and choice["message"]["reasoning_content"] is None
    assert _chat(server, max_tokens=64)["usage"]["completion_tokens"] == CHAT_REPLY_TOKENS  # the EOS counts

    for cut in ({"max_tokens": 6}, {"max_tokens": 64, "ignore_eos": True}):
        choice = _chat(server, **cut)["choices"][0]
        assert (choice["finish_reason"], choice["matched_stop"]) == ("length", None)

    last = _stream(server, max_tokens=64)[-1]["choices"][0]
    assert (last["finish_reason"], last["matched_stop"]) == ("stop", EOS)

    generated = server.get(
        "/generate",
        method="POST",
        body={"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 64}},
    ).json()
    assert generated["meta_info"]["finish_reason"] == {"type": "length", "length": 64}  # no chat turn to end


@pytest.mark.parametrize(
    ("settings", "request_body", "expected"),
    [
        ({"reasoning_parser": None}, {}, ChatReasoning(thinking=False, split=False)),
        ({"reasoning_parser": "qwen3"}, {}, ChatReasoning(thinking=True, split=True)),
        (
            {"reasoning_parser": "qwen3"},
            {"chat_template_kwargs": {"enable_thinking": False}},
            ChatReasoning(thinking=False, split=False),
        ),
        (
            {"reasoning_parser": "qwen3", "default_chat_template_kwargs": {"enable_thinking": False}},
            {"chat_template_kwargs": {"enable_thinking": True}},
            ChatReasoning(thinking=True, split=True),
        ),
        (
            {"reasoning_parser": "qwen3", "default_chat_template_kwargs": {"enable_thinking": False}},
            {},
            ChatReasoning(thinking=False, split=False),
        ),
        (
            {"reasoning_parser": "qwen3"},
            {"separate_reasoning": False},
            ChatReasoning(thinking=True, split=False),
        ),
        (
            {"reasoning_parser": "qwen3-thinking"},
            {"chat_template_kwargs": {"enable_thinking": False}},
            ChatReasoning(thinking=False, split=True),
        ),
        ({"reasoning_parser": "deepseek-r1"}, {}, ChatReasoning(thinking=False, split=False)),  # not imitated
    ],
)
def test_chat_reasoning(
    settings: dict[str, Any], request_body: dict[str, Any], expected: ChatReasoning
) -> None:
    assert chat_reasoning(settings, request_body) == expected


def test_the_qwen3_parser_makes_the_reply_reasoning(start_server: Start, model_dir: Path) -> None:
    server = start_server(
        ["--model-path", str(model_dir), "--skip-server-warmup", "--reasoning-parser", "qwen3"]
    )
    server.wait_ready()

    answer = _chat(server, max_tokens=64)
    message, used = answer["choices"][0]["message"], answer["usage"]
    assert message["content"] == "" and message["reasoning_content"].strip()
    assert used["reasoning_tokens"] == used["completion_tokens"] == CHAT_REPLY_TOKENS

    plain = _chat(server, max_tokens=64, chat_template_kwargs={"enable_thinking": False})
    assert plain["choices"][0]["message"]["content"] == message["reasoning_content"]
    assert (
        plain["choices"][0]["message"]["reasoning_content"] is None
        and plain["usage"]["reasoning_tokens"] == 0
    )

    events = _stream(server, max_tokens=64, stream_options={"include_usage": True})
    deltas = [event["choices"][0]["delta"] for event in events if event["choices"]]
    assert "".join(delta["reasoning_content"] or "" for delta in deltas) == message["reasoning_content"]
    assert not "".join(delta.get("content") or "" for delta in deltas)
    assert events[-1]["usage"]["reasoning_tokens"] == CHAT_REPLY_TOKENS

    held = _stream(server, max_tokens=64, stream_reasoning=False)
    reasoning = [
        e["choices"][0]["delta"]["reasoning_content"]
        for e in held
        if e["choices"][0]["delta"]["reasoning_content"]
    ]
    assert reasoning == [message["reasoning_content"]]  # one piece, when the reply ends
