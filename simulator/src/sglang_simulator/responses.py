"""JSON bodies shaped like SGLang 0.5.23's (``srt/entrypoints/http_server.py``,
``srt/entrypoints/openai/protocol.py``, ``srt/managers/tokenizer_manager.py``).
"""

from __future__ import annotations

import time
from typing import Any

from .checks import Plan
from .engine import Result

SGLANG_VERSION = "0.5.23"


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
    }


def _memory_usage(plan: Plan) -> dict[str, Any]:
    gib = 1024.0
    kv = plan.free_mib * plan.memory.mem_fraction_static - plan.weights_per_gpu_mib
    return {
        "weight": round(plan.weights_per_gpu_mib / gib, 3),
        "kvcache": round(max(0.0, kv) / gib, 3),
        "startup_available": round(plan.free_mib / gib, 3),
        "token_capacity": plan.max_total_num_tokens,
        "token_capacity_swa": None,
        "graph": {"decode": round(plan.memory.decode_max_bs * 2 / gib, 3)},
    }


def resolved_dict(plan: Plan) -> dict[str, Any]:
    out = dict(plan.settings)
    out["enable_dp_attention"] = int(out.get("attn_dp_size") or 1) > 1
    return out


def server_info(
    plan: Plan,
    *,
    launch_command: str,
    startup_time: dict[str, Any],
    last_gen_throughput: float,
    avg_spec_accept_length: float | None,
) -> dict[str, Any]:
    """``GET /server_info``: resolved fields, scheduler info, live state."""
    max_req_input_len = max(1, min(plan.context_length, plan.max_total_num_tokens) - 1)
    state = resolved_dict(plan)
    state.update(
        {
            "world_size": plan.world_size,
            "startup_time": startup_time,
            "effective_max_running_requests_per_dp": plan.max_running_requests,
            "last_gen_throughput": last_gen_throughput,
            "memory_usage": _memory_usage(plan),
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
            "startup_time": startup_time,
            "hicache_object_layout": None,
            "kv_events": None,
            "internal_states": [state],
            "version": SGLANG_VERSION,
            "frontend": "python",
        }
    )
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
    result: Result, *, weight_version: str, num_draft_tokens: int | None, speculative: bool
) -> dict[str, Any]:
    """``meta_info`` of ``/generate`` (tokenizer_manager)."""
    meta: dict[str, Any] = {
        "id": result.rid,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "weight_version": weight_version,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": 0,
    }
    if result.finish_reason is not None:
        meta["e2e_latency"] = max(0.0, result.finished - result.started)
        if speculative and result.verify_ct > 0:
            proposed = result.verify_ct * max(1, (num_draft_tokens or 2) - 1)
            correct = max(0, result.completion_tokens - result.verify_ct)
            meta["spec_accept_rate"] = correct / proposed
            meta["spec_accept_length"] = result.completion_tokens / result.verify_ct
            meta["spec_num_correct_drafts"] = correct
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = result.verify_ct
    return meta


def usage(result: Result, prompt_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + result.completion_tokens,
        "completion_tokens": result.completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def finish(result: Result) -> tuple[str | None, Any]:
    """(OpenAI finish_reason, matched_stop)."""
    reason = result.finish_reason
    if reason is None:
        return None, None
    return str(reason["type"]), reason.get("matched")


def chat_completion(
    result: Result, *, model: str, created: int, prompt_tokens: int, weight_version: str
) -> dict[str, Any]:
    reason, matched = finish(result)
    return {
        "id": result.rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.text, "reasoning_content": None},
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        ],
        "usage": usage(result, prompt_tokens),
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
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (sse_utils.build_sse_content layout)."""
    delta: dict[str, Any] = {"reasoning_content": None}
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


def chat_usage_chunk(result: Result, *, model: str, created: int, prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": result.rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(result, prompt_tokens),
    }


def completion(
    result: Result, *, model: str, created: int, prompt_tokens: int, weight_version: str
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
        "usage": usage(result, prompt_tokens),
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
