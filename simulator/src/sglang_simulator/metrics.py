"""``GET /metrics`` (only with ``--enable-metrics``), Prometheus text format.

Every ``sglang:`` family real SGLang 0.5.17 exported in the recordings under
``tests/recordings/`` (all of them still exist in 0.5.23's
``srt/observability/metrics_collector.py``), with the same type, help text and
label names; labels are written in sorted order, as real SGLang does.  The
prefix is ``sglang:`` (a colon).  Values the simulator models (running and
queued requests, token counters, throughput, accept length, KV-cache size,
HTTP request counts, startup timings) are live; the rest are zero.
Histograms observe every finished request with a zero duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .engine import Counters, Engine

Labels = list[tuple[str, str]]

_GEOMETRIC = [0.001 * 1.62**i for i in range(30)]
_TOKEN_BUCKETS = [
    *(100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0),
    *(8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0),
    *(35000.0, 40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0),
    *(1e6, 1.1e6),
]
_QUEUE_BUCKETS = [
    *(0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0),
    *(50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0),
    *(1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
]
_TTFT_BUCKETS = [
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
]
_E2E_BUCKETS = [*_TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0]
_ITL_BUCKETS = [
    *(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4),
    *(0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
]
_LOADS_BUCKETS = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0]
_ROUTING_EDGES = [0, 1, 2, 3, 5, 7, 10, 20, 50, 100, 200]
_GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")

# (name, help) of the scheduler gauges with the per-rank labels, in real SGLang's order.
_SCHEDULER_GAUGES = [
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("weight_memory_usage_gb", "Memory used by model weights in GB."),
    ("kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB."),
    ("page_size", "KV cache page size in tokens."),
    ("num_pages", "Number of KV cache pages."),
    ("context_len", "Maximum context length."),
    ("startup_available_gpu_memory_gb", "Available GPU memory in GB at startup."),
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("full_token_usage", "The token usage for full attention layers."),
    ("swa_token_usage", "The token usage for SWA layers."),
    ("mamba_usage", "The token usage for Mamba layers."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
    ("swa_available_tokens", "Number of free token slots in the SWA pool (hybrid-SWA only)."),
    ("swa_evictable_tokens", "Number of evictable (radix-cached) token slots in the SWA pool."),
    ("swa_used_tokens", "Number of actively used token slots in the SWA pool."),
    ("mamba_available_tokens", "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."),
    ("mamba_evictable_tokens", "Number of evictable (radix-cached) state slots in the mamba SSM pool."),
    ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool."),
    (
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    (
        "spec_cap_length",
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot "
        "(0 when no cap is scheduled).",
    ),
    (
        "spec_block_accept_length",
        "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; "
        "exact only in DSpark cap-accept mode).",
    ),
    ("spec_num_steps", "Currently active speculative_num_steps."),
    (
        "spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
    ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    (
        "pending_prealloc_token_usage",
        "The token usage for pending preallocated tokens (not preallocated yet).",
    ),
    ("utilization", "The utilization."),
    ("fwd_occupancy", "Forward pass GPU occupancy percentage."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch."),
]


@dataclass
class ServerFacts:
    """What /metrics needs to know about the server besides the engine's counters."""

    model_name: str
    max_total_num_tokens: int
    context_length: int = 0
    weight_gb: float = 0.0
    kv_cache_gb: float = 0.0
    startup_available_gb: float = 0.0
    speculative_num_steps: int = 0
    speculative_num_draft_tokens: int = 0
    speculative: bool = False
    hicache_host_total_tokens: int | None = None  # None: no --enable-hierarchical-cache
    startup_time: Mapping[str, float] = field(default_factory=dict)
    weight_load_seconds: float | None = None  # set by /update_weights_from_disk; absent until then
    http_requests: Mapping[tuple[str, str], int] = field(default_factory=dict)
    http_responses: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    http_active: Mapping[tuple[str, str], int] = field(default_factory=dict)


_WEIGHT_LOAD_HELP = (
    "Wall time of the most recent update_weights_from_<source> call on this scheduler rank (seconds). "
    "`source` label is one of: disk, distributed, tensor, ipc. Event-detection via changes(...[<range>]) > 0 "
    "— no separate counter needed."
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    items = sorted(pairs)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def _le(bound: float) -> str:
    return repr(float(bound)) if bound < 1e6 else f"{bound:g}"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, doc: str) -> None:
        self.lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} {kind}"]

    def sample(self, name: str, labels: Labels, value: float) -> None:
        self.lines.append(f"sglang:{name}{_labels(labels)} {_number(value)}")

    def histogram(
        self, name: str, labels: Labels, buckets: list[float], count: int, total: float = 0.0
    ) -> None:
        self.sample(f"{name}_sum", labels, total)
        for bound in buckets:
            self.sample(f"{name}_bucket", [*labels, ("le", _le(bound))], count)
        self.sample(f"{name}_bucket", [*labels, ("le", "+Inf")], count)
        self.sample(f"{name}_count", labels, count)


def _hicache_gauges(out: _Writer, rank: Labels, total_tokens: int) -> None:
    """metrics_collector.py's host-tier gauges (only with --enable-hierarchical-cache). The simulator keeps
    no prefix cache, so nothing is backed up to the host pool: used is 0."""
    out.family("hicache_host_used_tokens", "gauge", "Number of tokens currently used in the host KV cache.")
    out.sample("hicache_host_used_tokens", rank, 0)
    out.family("hicache_host_total_tokens", "gauge", "Total capacity of the host KV cache in tokens.")
    out.sample("hicache_host_total_tokens", rank, total_tokens)


def render(
    engine: Engine, *, model_name: str, max_total_num_tokens: int, facts: ServerFacts | None = None
) -> str:
    info = facts or ServerFacts(model_name=model_name, max_total_num_tokens=max_total_num_tokens)
    c = engine.snapshot()
    return _render(c, info)


def _render(c: Counters, info: ServerFacts) -> str:
    out = _Writer()
    model = ("model_name", info.model_name)
    engine_type = ("engine_type", "unified")
    short = [engine_type, model]
    rank = [engine_type, model, ("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0")]
    requests_by_kind = {kind: c.num_requests.get(kind, 0) for kind in ("false", "true")}
    finished = sum(requests_by_kind.values())
    kinds = [kind for kind, n in requests_by_kind.items() if n] or ["false"]

    out.family(
        "cuda_graph_passes_total", "counter", "Total number of forward passes categorized by CUDA graph."
    )
    for mode, value in (("prefill_none", finished), ("decode_none", c.forward_ct_decode)):
        out.sample("cuda_graph_passes_total", [*rank, ("mode", mode)], value)
    out.family(
        "realtime_tokens_total",
        "counter",
        "Total number of tokens processed (updated on each log interval). "
        "mode: prefill_compute, prefill_cache, decode.",
    )
    prompt_total = sum(c.prompt_tokens.values())
    generated_total = sum(c.generation_tokens.values())
    for mode, value in (("prefill_compute", prompt_total), ("decode", generated_total), ("prefill_cache", 0)):
        out.sample("realtime_tokens_total", [*rank, ("mode", mode)], value)
    for name, doc in (
        ("num_retracted_reqs", "The number of retracted requests."),
        ("num_paused_reqs", "The number of paused requests by async weight sync."),
    ):
        out.family(name, "gauge", doc)
        out.sample(name, [*rank, ("pid", "0")], 0)
    out.family(
        "process_cpu_seconds_total", "counter", "Total CPU time consumed by this process (user + system)"
    )
    for component in ("tokenizer", "detokenizer"):
        out.sample("process_cpu_seconds_total", [("component", component)], 0)
    out.family("http_requests_total", "counter", "Total number of HTTP requests by endpoint and method")
    for (endpoint, method), n in sorted(info.http_requests.items()):
        out.sample("http_requests_total", [("endpoint", endpoint), ("method", method)], n)
    out.family(
        "http_responses_total", "counter", "Total number of HTTP responses by endpoint and status code"
    )
    for (endpoint, method, status), n in sorted(info.http_responses.items()):
        out.sample(
            "http_responses_total", [("endpoint", endpoint), ("method", method), ("status_code", status)], n
        )
    for name, doc, values in (
        ("prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens),
        ("generation_tokens_total", "Number of generation tokens processed.", c.generation_tokens),
        ("num_requests_total", "Number of requests processed.", c.num_requests),
    ):
        out.family(name, "counter", doc)
        for kind in kinds:
            out.sample(name, [*short, ("is_streaming", kind)], values.get(kind, 0))
    if info.speculative:
        out.family("spec_verify_calls_total", "counter", "Number of speculative decoding verification calls.")
        out.sample("spec_verify_calls_total", short, c.spec_total_forward_ct + c.spec_forward_ct)
    out.family(
        "cached_tokens_total", "counter", "Number of cached prompt tokens by source (device/host/storage)."
    )
    out.sample("cached_tokens_total", [*short, ("cache_source", "device")], 0)
    out.family("routing_keys_active", "gauge", "Number of unique routing keys with active requests")
    out.sample("routing_keys_active", [], 0)
    out.family("http_requests_active", "gauge", "Number of currently active HTTP requests")
    for (endpoint, method), n in sorted(info.http_active.items()):
        out.sample("http_requests_active", [("endpoint", endpoint), ("method", method)], n)
    out.family("per_stage_req_latency_seconds", "histogram", "The latency of each stage of requests.")
    for stage in ("request_process", "prefill_forward"):
        out.histogram("per_stage_req_latency_seconds", [*rank, ("stage", stage)], _GEOMETRIC, finished)
    out.family("queue_time_seconds", "histogram", "Histogram of queueing time in seconds.")
    out.histogram("queue_time_seconds", rank, _QUEUE_BUCKETS, finished)

    running, queued = c.running, c.queued
    used = min(info.max_total_num_tokens, running * 256)
    usage = used / max(1, info.max_total_num_tokens)
    live = {
        "max_total_num_tokens": info.max_total_num_tokens,
        "weight_memory_usage_gb": info.weight_gb,
        "kv_cache_memory_usage_gb": info.kv_cache_gb,
        "page_size": 1,
        "num_pages": info.max_total_num_tokens,
        "context_len": info.context_length,
        "startup_available_gpu_memory_gb": info.startup_available_gb,
        "num_running_reqs": running,
        "num_queue_reqs": queued,
        "gen_throughput": c.last_gen_throughput,
        "token_usage": usage,
        "full_token_usage": usage,
        "num_used_tokens": used,
        "kv_available_tokens": info.max_total_num_tokens - used,
        "kv_used_tokens": used,
        "spec_accept_length": c.last_spec_accept_length,
        "spec_num_steps": info.speculative_num_steps,
        "spec_num_draft_tokens": info.speculative_num_draft_tokens,
    }
    for name, doc in _SCHEDULER_GAUGES:
        out.family(name, "gauge", doc)
        out.sample(name, rank, live.get(name, 0.0))
        if name == "kv_cache_memory_usage_gb":
            out.family("graph_memory_usage_gb", "gauge", "Memory used by captured device graphs in GB.")
            for phase in _GRAPH_PHASES:
                out.sample("graph_memory_usage_gb", [*rank, ("phase", phase)], 0.0)
        if name == "is_cuda_graph" and info.hicache_host_total_tokens is not None:
            _hicache_gauges(out, rank, info.hicache_host_total_tokens)
    for name, doc in (
        (
            "routing_key_running_req_count",
            "Distribution of routing keys by running request count (gt < count <= le).",
        ),
        (
            "routing_key_all_req_count",
            "Distribution of routing keys by running+waiting request count (gt < count <= le).",
        ),
    ):
        out.family(name, "gauge", doc)
        edges = [*(str(e) for e in _ROUTING_EDGES[1:]), "+Inf"]
        for low, high in zip(_ROUTING_EDGES, edges, strict=True):
            out.sample(name, [*rank, ("gt", str(low)), ("le", high)], 0)
    if info.weight_load_seconds is not None:
        out.family("weight_load_duration_seconds", "gauge", _WEIGHT_LOAD_HELP)
        labels = [*rank[:4], ("source", "disk"), rank[4]]
        out.sample("weight_load_duration_seconds", labels, info.weight_load_seconds)

    per_kind = [[*short, ("is_streaming", kind)] for kind in kinds]
    out.family("time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.")
    for labels, kind in zip(per_kind, kinds, strict=True):
        out.histogram("time_to_first_token_seconds", labels, _TTFT_BUCKETS, requests_by_kind[kind])
    out.family(
        "e2e_request_latency_seconds", "histogram", "Histogram of End-to-end request latency in seconds"
    )
    for labels, kind in zip(per_kind, kinds, strict=True):
        out.histogram("e2e_request_latency_seconds", labels, _E2E_BUCKETS, requests_by_kind[kind])
    for name, doc in (
        ("prompt_tokens_histogram", "Histogram of prompt token length."),
        ("uncached_prompt_tokens_histogram", "Histogram of uncached (compute) prompt token length."),
        ("generation_tokens_histogram", "Histogram of generation token length."),
    ):
        out.family(name, "histogram", doc)
        out.histogram(name, short, _TOKEN_BUCKETS, finished)
    out.family("get_loads_duration_seconds", "histogram", "Time spent serving /v1/loads requests (seconds).")
    out.histogram(
        "get_loads_duration_seconds", short, _LOADS_BUCKETS, info.http_requests.get(("/v1/loads", "GET"), 0)
    )
    out.family("inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.")
    out.histogram("inter_token_latency_seconds", short, _ITL_BUCKETS, max(0, generated_total - finished))
    out.family("startup_time_seconds", "gauge", "Engine startup duration by phase in seconds.")
    for phase in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"):
        seconds = info.startup_time.get(phase, info.startup_time.get("scheduler_e2e", 0.0))
        out.sample("startup_time_seconds", [*short, ("phase", phase)], float(seconds))
    out.family("startup_cuda_graph_time_seconds", "gauge", "CUDA graph capture duration by phase in seconds.")
    for phase in _GRAPH_PHASES:
        out.sample("startup_cuda_graph_time_seconds", [*short, ("phase", phase)], 0.0)
    return "\n".join(out.lines) + "\n"
