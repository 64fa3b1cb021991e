"""``GET /metrics`` (only with ``--enable-metrics``), Prometheus text format.

Names, labels and help texts are SGLang 0.5.23's
(``srt/observability/metrics_collector.py``): the prefix is ``sglang:``
(a colon), scheduler gauges carry model_name/engine_type/tp_rank/pp_rank/
moe_ep_rank, tokenizer counters carry model_name/engine_type/is_streaming.
Only a handful of the real metrics are exported.
"""

from __future__ import annotations

from .engine import Engine


def _labels(pairs: list[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(engine: Engine, *, model_name: str, max_total_num_tokens: int) -> str:
    c = engine.snapshot()
    running, queued = c.running, c.queued
    throughput = c.last_gen_throughput
    accept = c.last_spec_accept_length
    prompt, generation, requests = c.prompt_tokens, c.generation_tokens, c.num_requests
    sched = _labels(
        [
            ("model_name", model_name),
            ("engine_type", "unified"),
            ("tp_rank", "0"),
            ("pp_rank", "0"),
            ("moe_ep_rank", "0"),
        ]
    )
    used = min(max_total_num_tokens, running * 256)
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued),
        ("sglang:gen_throughput", "The generation throughput (token/s).", throughput),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("sglang:token_usage", "The token usage.", used / max(1, max_total_num_tokens)),
        ("sglang:num_used_tokens", "The number of used tokens.", used),
        (
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            accept,
        ),
    ]
    lines: list[str] = []
    for name, doc, value in gauges:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{sched} {float(value)}"]
    counters = [
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", prompt),
        ("sglang:generation_tokens_total", "Number of generation tokens processed.", generation),
        ("sglang:num_requests_total", "Number of requests processed.", requests),
    ]
    for name, doc, values in counters:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter"]
        for streaming in ("false", "true"):
            labels = _labels(
                [("model_name", model_name), ("engine_type", "unified"), ("is_streaming", streaming)]
            )
            lines.append(f"{name}{labels} {float(values.get(streaming, 0))}")
    return "\n".join(lines) + "\n"
