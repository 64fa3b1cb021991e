"""JSON bodies shaped like SGLang 0.5.23's (``srt/entrypoints/http_server.py``,
``srt/entrypoints/openai/protocol.py``, ``srt/managers/tokenizer_manager.py``).
"""

from __future__ import annotations

import datetime
import functools
import json
import time
import zlib
from importlib import resources
from typing import Any

from .cache_pools import gdn_shape, mamba_cache_chunk_size
from .checks import Plan
from .engine import Result
from .facts import SGLANG_VERSION, release
from .model import CHAT_TEMPLATE_MISSING


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.17"`` -> ``(0, 5, 17)`` (non-numeric parts count as 0)."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def is_legacy(version: str) -> bool:
    """Shapes recorded from real 0.5.17 that 0.5.23 no longer has (tests/recordings/)."""
    return version_tuple(version) <= (0, 5, 17)


_EMBEDDING_BCG_BATCH_SIZES = [
    *range(4, 33, 4),
    *range(48, 257, 16),
    *range(288, 513, 32),
    *range(576, 1025, 64),
    *range(1280, 4097, 256),
    *range(4608, 8193, 512),
]


def embedding_plan() -> dict[str, Any]:
    """``model_info["embedding"]`` of a generative model (nothing enabled), as real SGLang answers."""
    return {
        "family": "none",
        "task": "none",
        "execution": "none",
        "attention": "none",
        "pooling": "model_defined",
        "normalize": False,
        "postprocessor": "none",
        "tokenizer_special_tokens": "model_default",
        "supports_dimensions": False,
        "supports_token_embeddings": False,
        "supports_multimodal": False,
        "requires_embedding_flag": False,
        "auto_enable_embedding": False,
        "bcg_eligibility": "disabled",
        "safe_disable_kv_cache": False,
        "safe_disable_radix_cache": False,
        "safe_disable_chunked_prefill": False,
        "enabled": False,
        "matryoshka_dimensions": [],
        "bcg": {
            "prefill_backend": "disabled",
            "enabled": False,
            "capture_token_budget": 8192,
            "capture_batch_sizes": list(_EMBEDDING_BCG_BATCH_SIZES),
        },
        "cache": {
            "kv_cache_disabled": False,
            "radix_cache_disabled": False,
            "chunked_prefill_disabled": False,
        },
    }


def model_info(plan: Plan) -> dict[str, Any]:
    s = plan.settings
    return {
        "model_path": s["model_path"],
        "served_model_name": s["served_model_name"],
        "tokenizer_path": s["tokenizer_path"],
        "is_generation": True,
        "preferred_sampling_params": s.get("preferred_sampling_params"),
        "weight_version": s.get("weight_version", "default"),
        "load_format": s.get("load_format"),
        "reasoning_parser": s.get("reasoning_parser"),
        "tool_call_parser": s.get("tool_call_parser"),
        "disaggregation_mode": s.get("disaggregation_mode"),
        "has_image_understanding": plan.model.has_vision,
        "has_audio_understanding": isinstance(plan.model.config.get("audio_config"), dict),
        "model_type": plan.model.model_type,
        "architectures": list(plan.model.architectures) or None,
        "embedding": embedding_plan(),
    }


def memory_usage(plan: Plan) -> dict[str, Any]:
    gib = 1024.0
    kv = plan.free_mib * plan.memory.mem_fraction_static - plan.weights_per_gpu_mib
    return {
        "weight": round(plan.weights_per_gpu_mib / gib, 3),
        "kvcache": round(max(0.0, kv) / gib, 3),
        "startup_available": round(plan.free_mib / gib, 3),
        "token_capacity": plan.max_total_num_tokens,
        "token_capacity_swa": None,
        "graph": {
            phase: round(plan.memory.decode_max_bs * 2 / gib, 3) if phase == "decode" else 0.0
            for phase in (
                "prefill",
                "decode",
                "target_verify",
                "draft_prefill",
                "draft_decode",
                "draft_extend",
            )
        },
    }


def _cuda_graph_phase(plan: Plan, phase: str, max_bs: int) -> dict[str, Any]:
    s = plan.settings
    off = s.get("disable_cuda_graph") or s.get(f"disable_{phase}_cuda_graph")
    backend = s.get(f"cuda_graph_backend_{phase}") or ("disabled" if off else "full")
    sizes = (
        [1, 2, 4, 8, *range(12, 33, 4), *range(40, 257, 8)]
        if phase == "decode"
        else list(_EMBEDDING_BCG_BATCH_SIZES)
    )
    return {
        "backend": backend,
        "max_bs": max_bs,
        "bs": [size for size in sizes if size <= max_bs],
        "tc_compiler": "eager",
        "full_prefill_max_req": None,
        "full_prefill_prefix_chunk_tokens": None,
    }


def _always_resolved(plan: Plan) -> dict[str, Any]:
    """Fields real SGLang always resolves (recorded from 0.5.17), which the simulator would leave None."""
    s = plan.settings
    return {
        "device": "cuda",
        "page_size": 1,
        "random_seed": zlib.crc32(f"{s.get('host')}:{s.get('port')}".encode()) % (1 << 30),
        "custom_weight_loader": [],
        "expert_distribution_recorder_buffer_size": 1000,
        "mm_feature_transport": "cuda_ipc",
        "mm_process_config": {},
        "speculative_moe_runner_backend": "auto",
        "cuda_graph_config": {
            "decode": _cuda_graph_phase(plan, "decode", max(1, plan.memory.decode_max_bs)),
            "prefill": _cuda_graph_phase(plan, "prefill", max(1, plan.memory.chunked_prefill_size)),
        },
    }


def cuda_graph_config_locked(settings: dict[str, Any]) -> list[list[str]]:
    """The cuda_graph_config fields the command line set (real SGLang lists them in set order,
    which the contract test ignores): both phases' backends, and each phase's max batch size given
    by its flag (recorded with --cuda-graph-max-bs-decode)."""
    locked = [["prefill", "backend"], ["decode", "backend"]]
    for phase in ("decode", "prefill"):
        if settings.get(f"cuda_graph_max_bs_{phase}") is not None:
            locked.append([phase, "max_bs"])
    return locked


def resolved_dict(plan: Plan) -> dict[str, Any]:
    out = dict(plan.settings)
    out["enable_dp_attention"] = int(out.get("attn_dp_size") or 1) > 1
    # arg_groups/overrides.py:1462-1492 _mamba_radix_cache_resolution: a hybrid linear-attention model (the
    # registry's Qwen3-Next / Qwen3.5 among them) with its radix cache on (recorded true on the tiny Qwen3.5).
    out["uses_mamba_radix_cache"] = gdn_shape(plan.settings, plan.model) is not None and not out.get(
        "disable_radix_cache"
    )
    for key, value in _always_resolved(plan).items():
        if key in out and out[key] is None:
            out[key] = value
    return out


def server_info(
    plan: Plan,
    *,
    launch_command: str,
    startup_time: dict[str, Any],
    last_gen_throughput: float,
    avg_spec_accept_length: float | None,
    version: str | None = None,
) -> dict[str, Any]:
    """``GET /server_info``: resolved fields, scheduler info, live state.

    ``internal_states[0]`` is the scheduler's ``vars(server_args)``: the fields plus the private
    bookkeeping attributes real SGLang leaks there (recorded from 0.5.17), the startup timings
    without ``tokenizer_e2e``, and ``avg_spec_accept_length`` only after the first decode-log window.
    """
    version = version or release()
    # managers/tp_worker.py: max_req_len = min(context_len - 1, kv_capacity - 1); max_req_input_len = that - 5
    # (recorded: 2042 for a 2048 context).
    max_req_input_len = max(1, min(plan.context_length - 1, plan.max_total_num_tokens - 1) - 5)
    state = resolved_dict(plan)
    state.pop("custom_sigquit_handler", None)  # top level only
    if state.get("pp_max_micro_batch_size") is None:
        state["pp_max_micro_batch_size"] = plan.max_running_requests  # the scheduler's copy is resolved
    state.update(
        {
            "_resolved_overrides": [
                *([name, declared] for name, declared in plan.resolutions),
                ["_page_size_default", {"page_size": plan.settings.get("page_size") or 1}],
                ["_data_parallelism_defaults", {"enable_dp_attention": False, "enable_dp_lm_head": False}],
                ["_speculative_moe_runner_default", {"speculative_moe_runner_backend": "auto"}],
            ],
            "grpc_worker_threads": plan.settings.get("grpc_worker_threads") or 4,
            "_quantization_explicitly_unset": False,
            "_cuda_graph_config_locked": cuda_graph_config_locked(plan.settings),
            "max_speculative_num_draft_tokens": plan.settings.get("speculative_num_draft_tokens"),
        }
    )
    if is_legacy(version):
        state.update({"_declarations_materialized": True, "_mx_config_cache": {}})
    chunk_size = mamba_cache_chunk_size(plan.model, int(plan.settings.get("page_size") or 1))
    if chunk_size is not None:  # cached by the scheduler's first read of ServerArgs.mamba_cache_chunk_size
        state["_mamba_cache_chunk_size"] = chunk_size
    state.update(
        {
            "world_size": plan.world_size,
            "startup_time": startup_time,
            "effective_max_running_requests_per_dp": plan.max_running_requests,
            "last_gen_throughput": last_gen_throughput,
            "memory_usage": memory_usage(plan),
        }
    )
    if avg_spec_accept_length is not None:
        state["avg_spec_accept_length"] = avg_spec_accept_length
    info = resolved_dict(plan)
    info["launch_command"] = launch_command
    info.update(
        {
            "status": "ready",
            "max_total_num_tokens": plan.max_total_num_tokens,
            "max_req_input_len": max_req_input_len,
            "startup_time": {**startup_time, "tokenizer_e2e": startup_time.get("scheduler_e2e", 0.0)},
            "hicache_object_layout": None,
            "kv_events": None,
            "internal_states": [state],
            "version": version,
            "frontend": "python",
        }
    )
    info.setdefault("custom_sigquit_handler", None)
    if is_legacy(version):  # 0.5.17 has neither the launch command nor these two
        for key in ("launch_command", "hicache_object_layout", "frontend"):
            info.pop(key, None)
    return info


def model_card(name: str, context_length: int) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": context_length,
    }


def generate_meta_info(
    result: Result,
    *,
    weight_version: str,
    num_draft_tokens: int | None,
    speculative: bool,
    version: str = SGLANG_VERSION,
) -> dict[str, Any]:
    """``meta_info`` of ``/generate`` (tokenizer_manager), keys in real SGLang's order."""
    now_wall, now_mono = time.time(), time.monotonic()

    def wall(mono: float) -> float:
        return now_wall - (now_mono - mono)

    meta: dict[str, Any] = {
        "id": result.rid,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "weight_version": weight_version,
        "num_retractions": 0,
        "forward_entry_time": wall(result.started),
        "prefill_finished_time": wall(result.started),
        "queue_time": 0.0,
        "reasoning_tokens": 0,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": 0,
        "cached_tokens_details": None,  # a {"device", "host"} mapping once tokens come from the prefix cache
        "dp_rank": None,
    }
    if result.finish_reason is None:
        return meta
    meta["e2e_latency"] = max(0.0, result.finished - result.started)
    if speculative and result.verify_ct > 0:
        drafts = max(1, (num_draft_tokens or 2) - 1)
        proposed = result.verify_ct * drafts
        correct = max(0, result.completion_tokens - result.verify_ct - 1)  # the prefill's token is no draft
        meta["spec_accept_rate"] = correct / proposed
        meta["spec_accept_length"] = result.completion_tokens / result.verify_ct
        meta["spec_num_correct_drafts"] = correct
        meta["spec_num_proposed_drafts"] = proposed
        meta["spec_verify_ct"] = result.verify_ct
        if is_legacy(version):
            meta["spec_accepted_drafts"] = correct
            meta["spec_proposed_drafts"] = proposed
        # Verify steps by accepted drafts, up to the largest count seen (real 0.5.17: [255] when none is
        # accepted).
        per_step = min(drafts, round(correct / result.verify_ct))
        histogram = [0] * per_step + [result.verify_ct]
        meta["spec_correct_drafts_histogram"] = histogram
        if is_legacy(version):
            meta["spec_accept_histogram"] = list(histogram)
    elapsed = max(1e-9, result.finished - result.started)
    meta.update(
        {
            "request_received_ts": wall(result.started),
            "api_server_dispatch_finish_ts": wall(result.started),
            "request_finished_ts": wall(result.finished),
            "decode_throughput": result.completion_tokens / elapsed,
            "response_sent_to_client_ts": now_wall,
        }
    )
    return meta


def usage(
    result: Result, prompt_tokens: int, version: str = SGLANG_VERSION, reasoning_tokens: int = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + result.completion_tokens,
        "completion_tokens": result.completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning_tokens,
    }
    if not is_legacy(version):
        out["completion_tokens_details"] = None
    return out


def get_load(running: int, queued: int) -> list[dict[str, Any]]:
    """``GET /get_load`` (0.5.17; deprecated there, gone in 0.5.23)."""
    return [
        {
            "dp_rank": 0,
            "num_reqs": running + queued,
            "num_waiting_reqs": queued,
            "num_tokens": 0,
            "num_pending_tokens": 0,
            "ts_tic": time.monotonic(),
        }
    ]


@functools.cache
def loads_table(version: str) -> dict[str, Any] | None:
    """``data/v1_loads-<version>.json`` (simulator/tools/extract_v1_loads.py, from the release's wheel): the
    ``LoadSnapshot`` core fields and the sections ``include=`` selects; None for a release without one."""
    path = resources.files("sglang_simulator").joinpath("data").joinpath(f"v1_loads-{version}.json")
    if not path.is_file():
        return None
    table: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return table


def select_sections(load: dict[str, Any], version: str, include: str | None) -> dict[str, Any]:
    """One rank's load as ``LoadSnapshot.to_dict(include)`` of `version` writes it: every core field, then
    the sections `include` names (comma-separated; none or ``all``: every section the rank has). Raises
    ValueError for a section the release does not know, as ``to_dict`` does."""
    table = loads_table(version)
    if table is None:
        return load
    out = {key: load.get(key, 0) for key in table["core"]}  # a counter the simulator keeps no figure for: 0
    wanted = {part.strip() for part in include.split(",")} if include else None
    if wanted is not None and "all" not in wanted:
        unknown = wanted - set(table["valid_sections"])
        if unknown:
            raise ValueError(
                f"Invalid include sections: {unknown}. Valid options: {sorted(table['valid_sections'])}"
            )
    for field, name in table["sections"]:
        if load.get(field) is not None and (wanted is None or "all" in wanted or name in wanted):
            out[field] = load[field]
    return out


def loads(
    plan: Plan, *, version: str, running: int, queued: int, gen_throughput: float, include: str | None = None
) -> dict[str, Any]:
    """``GET /v1/loads`` (``srt/entrypoints/v1_loads.py``), one DP rank, with the sections ``include``
    selects."""
    usage_info = memory_usage(plan)
    tokens = plan.max_total_num_tokens
    load = {
        "timestamp": time.time(),
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": queued,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": 0,
        "num_total_tokens": 0,
        "num_active_tokens": 0,
        "max_total_num_tokens": tokens,
        "max_running_requests": plan.max_running_requests,
        "token_usage": 0.0,
        "gen_throughput": gen_throughput,
        "cache_hit_rate": 0.0,
        "utilization": 0.0,
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": [0.0] * 6,
        "memory": {
            "weight_gb": usage_info["weight"],
            "kv_cache_gb": usage_info["kvcache"],
            "graph_gb": 0.0,
            "token_capacity": tokens,
        },
        "disaggregation": {
            "mode": "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        },
        "queues": {"waiting": queued, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
    }
    gpu = plan.gpus[0].name if plan.gpus else "NVIDIA GPU"
    return {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
        "version": version,
        "accelerator": gpu,
        "num_accelerators": max(1, len(plan.gpus) // max(1, int(plan.settings.get("dp_size") or 1))),
        "loads": [select_sections(load, version, include)],
    }


def finish(result: Result) -> tuple[str | None, Any]:
    """(OpenAI finish_reason, matched_stop)."""
    reason = result.finish_reason
    if reason is None:
        return None, None
    return str(reason["type"]), reason.get("matched")


def chat_completion(
    result: Result,
    *,
    model: str,
    created: int,
    prompt_tokens: int,
    weight_version: str,
    version: str = SGLANG_VERSION,
    reasoning_split: bool = False,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """``reasoning_split``: the reply is all reasoning (reasoning.py); serving_chat.py answers an empty
    content as "" and an empty reasoning as None."""
    reason, matched = finish(result)
    reasoning, content = (result.text or None, "") if reasoning_split else (None, result.text)
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if is_legacy(version):
        message["tool_calls"] = None  # 0.5.23's ChatMessage drops a None tool_calls
    return {
        "id": result.rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        ],
        "usage": usage(result, prompt_tokens, version, reasoning_tokens),
        "metadata": {"weight_version": weight_version},
    }


def chat_chunk(
    rid: str,
    *,
    model: str,
    created: int,
    role: str | None = None,
    content: str | None = None,
    finish_reason: str | None = None,
    matched_stop: Any = None,
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (sse_utils.build_sse_content layout)."""
    delta: dict[str, Any] = {"reasoning_content": reasoning_content}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
                "matched_stop": matched_stop,
            }
        ],
    }


def chat_usage_chunk(
    result: Result,
    *,
    model: str,
    created: int,
    prompt_tokens: int,
    version: str = SGLANG_VERSION,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    return {
        "id": result.rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(result, prompt_tokens, version, reasoning_tokens),
    }


def completion(
    result: Result,
    *,
    model: str,
    created: int,
    prompt_tokens: int,
    weight_version: str,
    version: str = SGLANG_VERSION,
) -> dict[str, Any]:
    reason, matched = finish(result)
    return {
        "id": result.rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": result.text,
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        ],
        "usage": usage(result, prompt_tokens, version),
        "metadata": {"weight_version": weight_version},
    }


def completion_chunk(
    rid: str, *, model: str, created: int, text: str, finish_reason: str | None, matched_stop: Any
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "matched_stop": matched_stop,
            }
        ],
    }


def error_response(message: str, code: int = 400) -> dict[str, Any]:
    """FastAPI validation errors, as SGLang's handler rewrites them."""
    phrase = {400: "Bad Request", 404: "Not Found", 415: "Unsupported Media Type"}.get(code, "Error")
    return {"object": "error", "message": message, "type": phrase, "param": None, "code": code}


def chat_template_missing() -> dict[str, Any]:
    """A chat completion for a tokenizer without a chat template: transformers' ValueError, as SGLang
    answers it."""
    return {
        "object": "error",
        "message": CHAT_TEMPLATE_MISSING,
        "type": "BadRequest",
        "param": None,
        "code": 400,
    }
