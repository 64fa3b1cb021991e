"""Fake generation with SGLang-shaped bookkeeping.

Text is deterministic (a function of the prompt).  Time is simulated: every
forward step (a decode step, or a speculative verify step that yields several
tokens) sleeps ``SGLANG_SIM_TOKEN_SECONDS``, and at most
``max_running_requests`` requests run at once; the rest wait in the queue.

Speculative statistics follow SGLang: the per-request ``spec_accept_length``
is completion tokens / verify steps; the server-wide average behind
``/server_info`` ``avg_spec_accept_length`` and the
``sglang:spec_accept_length`` gauge only move when the scheduler writes its
periodic decode log, every ``--decode-log-interval`` (40) decode steps.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_VOCAB = (
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while"),
    *("simulated", "tokens", "flow", "from", "no", "GPU", "at", "all", "into", "your"),
    *("client", "and", "every", "word", "here", "is", "fake", "but", "deterministic", "so"),
    *("tests", "can", "compare", "outputs", "across", "runs", "of", "same", "prompt", "."),
)
_TOKEN_BASE = 1000

# How long a chat reply is when nothing cuts it short: its last token is the model's EOS, which ends the
# assistant's turn (real 0.5.17: the tiny Qwen3.5's reply to a 64-token budget ended by its EOS after 34).
CHAT_REPLY_TOKENS = 24


def count_prompt_tokens(text: str) -> int:
    """About four characters per token, like common BPE vocabularies."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


@dataclass
class Step:
    """Tokens produced by one forward step."""

    token_ids: list[int]
    text: str


@dataclass
class Result:
    rid: str
    prompt_tokens: int
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: dict[str, Any] | None = None
    verify_ct: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float = 0.0

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)


@dataclass
class Counters:
    prompt_tokens: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    generation_tokens: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    num_requests: dict[str, int] = field(default_factory=lambda: {"false": 0, "true": 0})
    running: int = 0
    queued: int = 0
    forward_ct_decode: int = 0
    spec_accept_tokens: int = 0
    spec_forward_ct: int = 0
    spec_total_accept_tokens: int = 0
    spec_total_forward_ct: int = 0
    last_spec_accept_length: float = 0.0
    last_gen_throughput: float = 0.0


class Engine:
    def __init__(
        self,
        *,
        max_running_requests: int,
        token_seconds: float,
        eos_token_id: int,
        accept_length: float | None,
        num_draft_tokens: int | None,
        decode_log_interval: int,
        log: logging.LoggerAdapter[logging.Logger],
        cuda_graph: bool = True,
    ) -> None:
        self.cuda_graph = cuda_graph
        self.token_seconds = token_seconds
        self.eos_token_id = eos_token_id
        self.accept_length = accept_length
        self.num_draft_tokens = num_draft_tokens
        self.decode_log_interval = max(1, decode_log_interval)
        self.log = log
        self.counters = Counters()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, max_running_requests))
        self._recent: deque[tuple[float, int]] = deque()
        self._interval_tokens = 0
        self._interval_start = time.monotonic()

    # -- bookkeeping ---------------------------------------------------------

    def avg_spec_accept_length(self) -> float | None:
        with self._lock:
            c = self.counters
            if self.accept_length is None or c.spec_total_forward_ct <= 0:
                return None
            return c.spec_total_accept_tokens / c.spec_total_forward_ct

    def snapshot(self) -> Counters:
        with self._lock:
            return copy.deepcopy(self.counters)

    def gen_throughput(self) -> float:
        with self._lock:
            return self.counters.last_gen_throughput

    def _on_step(self, tokens: int) -> None:
        with self._lock:
            c = self.counters
            c.forward_ct_decode += 1
            self._interval_tokens += tokens
            if self.accept_length is not None:
                c.spec_accept_tokens += tokens
                c.spec_forward_ct += 1
            if c.forward_ct_decode % self.decode_log_interval != 0:
                return
            now = time.monotonic()
            gap = max(now - self._interval_start, 1e-9)
            c.last_gen_throughput = self._interval_tokens / gap
            self._interval_tokens, self._interval_start = 0, now
            msg = f"Decode batch, #running-req: {c.running}, #token: {c.running * 256}, token usage: 0.00, "
            if self.accept_length is not None and c.spec_forward_ct > 0:
                accept = c.spec_accept_tokens / c.spec_forward_ct
                drafts = (self.num_draft_tokens or 2) - 1
                rate = (c.spec_accept_tokens - c.spec_forward_ct) / max(1, c.spec_forward_ct * drafts)
                c.last_spec_accept_length = accept
                c.spec_total_accept_tokens += c.spec_accept_tokens
                c.spec_total_forward_ct += c.spec_forward_ct
                c.spec_accept_tokens = c.spec_forward_ct = 0
                msg += f"accept len: {accept:.2f}, accept rate: {rate:.2f}, "
            msg += (
                f"cuda graph: {self.cuda_graph}, gen throughput (token/s): {c.last_gen_throughput:.2f}, "
                f"#queue-req: {c.queued}"
            )
        self.log.info(msg)

    # -- generation ----------------------------------------------------------

    def _step_sizes(self, total: int) -> Iterator[tuple[int, int]]:
        """(tokens returned, tokens accepted) per forward step: (1, 1) without speculation, else the
        prefill's token, then ~accept_length per verify step; the last step's accepted tokens count in full
        although the request takes only what it still needs (real 0.5.17: 256 tokens in 255 verify steps at
        accept length 1, in 64 at 4, and the decode log's `accept len` 4.00)."""
        if self.accept_length is None:
            yield from ((1, 1) for _ in range(total))
            return
        if total <= 0:
            return
        yield 1, 1  # the prefill's token
        produced, step = 1, 0
        while produced < total:
            step += 1
            accepted = max(produced + 1, 1 + math.floor(step * self.accept_length)) - produced
            size = min(total - produced, accepted)
            yield size, accepted
            produced += size

    def generate(
        self,
        prompt: str,
        max_new_tokens: int | None,
        *,
        stream: bool,
        rid: str | None = None,
        reply_tokens: int | None = None,
    ) -> Iterator[tuple[Step, Result]]:
        """Run one request; yields after every forward step.

        ``reply_tokens``: the reply ends with the EOS as its token number ``reply_tokens`` (a chat turn);
        None: the text runs on to ``max_new_tokens`` (a plain continuation; a reply of CHAT_REPLY_TOKENS
        when that is None too)."""
        prompt_tokens = count_prompt_tokens(prompt)
        result = Result(rid=rid or uuid.uuid4().hex, prompt_tokens=prompt_tokens)
        limit, ends_with_eos = reply_end(max_new_tokens, reply_tokens)
        seed = int.from_bytes(hashlib.sha256(prompt.encode("utf-8")).digest()[:4], "big")
        key = "true" if stream else "false"
        with self._lock:
            self.counters.queued += 1
        self._slots.acquire()
        try:
            with self._lock:
                self.counters.queued -= 1
                self.counters.running += 1
                self.counters.num_requests[key] += 1
                self.counters.prompt_tokens[key] += prompt_tokens
            time.sleep(self.token_seconds * prompt_tokens * 0.02)  # prefill
            position = 0
            for index, (size, accepted) in enumerate(self._step_sizes(limit)):
                ids = [_TOKEN_BASE + (seed + (position + i) * 7) % len(_VOCAB) for i in range(size)]
                words = ids
                if ends_with_eos and position + size >= limit:
                    words = ids[:-1]
                    ids = [*words, self.eos_token_id]  # a special token: it adds no text
                text = "".join(" " + _VOCAB[t - _TOKEN_BASE] for t in words)
                position += size
                time.sleep(self.token_seconds)
                result.output_ids.extend(ids)
                result.text += text
                # With speculation the first token comes from the prefill, not from a verify (decode) step.
                verify = self.accept_length is None or index > 0
                if verify:
                    result.verify_ct += 1
                with self._lock:
                    self.counters.generation_tokens[key] += size
                if verify:
                    self._on_step(accepted)
                if position >= limit:
                    self._finish(result, max_new_tokens, ends_with_eos)
                yield Step(ids, text), result
            if limit == 0:
                self._finish(result, max_new_tokens, ends_with_eos)
                yield Step([], ""), result
        finally:
            with self._lock:
                self.counters.running -= 1
            self._slots.release()

    def _finish(self, result: Result, max_new_tokens: int | None, by_eos: bool) -> None:
        """schedule_batch.py FINISH_MATCHED_TOKEN / FINISH_LENGTH ``to_json()``."""
        if by_eos:
            result.finish_reason = {"type": "stop", "matched": self.eos_token_id}
        else:
            result.finish_reason = {"type": "length", "length": max_new_tokens}
        result.finished = time.monotonic()

    def run(
        self,
        prompt: str,
        max_new_tokens: int | None,
        *,
        rid: str | None = None,
        reply_tokens: int | None = None,
    ) -> Result:
        result: Result | None = None
        steps = self.generate(prompt, max_new_tokens, stream=False, rid=rid, reply_tokens=reply_tokens)
        for _, step_result in steps:
            result = step_result
        if result is None:  # pragma: no cover - generate always yields
            raise RuntimeError("generation produced nothing")
        return result


def reply_end(max_new_tokens: int | None, reply_tokens: int | None) -> tuple[int, bool]:
    """(tokens the request generates, whether the last of them is the EOS). Real SGLang checks the length
    before the EOS (schedule_batch.py ``update_finish_state``), so a reply that fills max_new_tokens
    exactly ends by length."""
    if max_new_tokens is None:
        return reply_tokens or CHAT_REPLY_TOKENS, True
    if reply_tokens is not None and reply_tokens < max_new_tokens:
        return reply_tokens, True
    return max_new_tokens, False
