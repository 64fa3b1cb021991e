"""Startup: resolve the settings and fail where SGLang 0.5.23 would fail.

The order follows the real launch: read the model config and resolve the
arguments (main process), then, per scheduler, pick the CUDA device, check
that TP ranks see balanced free memory, look up the model class, load the
weights (target, then draft) and size the KV cache.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cache_pools import RequestCap, gdn_shape, mamba_cache_size_given, resolve_max_num_reqs
from .draft import accept_length_for, draft_from_target
from .errors import StartupError
from .facts import Facts
from .gpus import Gpu, GpuError, Inventory, live_usages, load_inventory, visible_gpus
from .knobs import Knobs
from .model import ModelInfo, load_model
from .resolve import (
    EAGLE_FAMILY,
    MemoryPlan,
    default_accept_length,
    resolve_mamba_radix_cache,
    resolve_memory,
    resolve_serving,
    resolve_speculative,
)

_GIB = 1024.0
LogAdapter = logging.LoggerAdapter[logging.Logger]


@dataclass(frozen=True)
class Plan:
    """Everything the running simulator needs, decided at startup."""

    settings: dict[str, Any]
    model: ModelInfo
    draft: ModelInfo | None
    inventory: Inventory
    gpus: tuple[Gpu, ...]
    memory: MemoryPlan
    free_mib: float
    weights_per_gpu_mib: float
    used_mib: int
    max_total_num_tokens: int
    max_running_requests: int
    mamba_cap: RequestCap | None  # the mamba cache's cap on them, where the flags size that cache
    context_length: int
    speculative_algorithm: str | None
    accept_length: float | None
    world_size: int
    process_name: str
    memory_error: StartupError | None
    resolutions: tuple[tuple[str, dict[str, Any]], ...] = ()


def base_settings(parsed: Mapping[str, Any], facts: Facts) -> dict[str, Any]:
    """The ServerArgs record: parsed fields plus fields without a flag."""
    settings = {k: v for k, v in parsed.items() if k not in facts.non_field_dests}
    for name, default in facts.record_only_fields.items():
        settings.setdefault(name, default)
    return settings


def _ordinals(settings: Mapping[str, Any]) -> list[int]:
    """CUDA ordinals the schedulers use (``compute_local_gpu_id`` per DP rank)."""
    tp = int(settings.get("tp_size") or 1)
    pp = int(settings.get("pp_size") or 1)
    dp = int(settings.get("dp_size") or 1)
    base = int(settings.get("base_gpu_id") or 0)
    step = int(settings.get("gpu_id_step") or 1)
    nnodes = int(settings.get("nnodes") or 1)
    if nnodes > 1:
        # A node of a multi-node launch runs its share of the ranks, from GPU 0
        # (engine.py's _calculate_rank_ranges).
        return [base + rank * step for rank in range(max(1, tp * pp // nnodes))]
    return [
        base + d * tp * pp * step + p * tp + t * step for d in range(dp) for p in range(pp) for t in range(tp)
    ]


def _pick_gpus(settings: Mapping[str, Any], inventory: Inventory, env: Mapping[str, str]) -> tuple[Gpu, ...]:
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    visible = visible_gpus(inventory, cvd)
    ordinals = _ordinals(settings)
    if not visible:
        raise StartupError(
            "RuntimeError: No CUDA GPUs are available",
            details=(f"CUDA_VISIBLE_DEVICES={cvd!r} exposes no GPU of this host.",),
        )
    if max(ordinals) >= len(visible):
        raise StartupError(
            "RuntimeError: CUDA error: invalid device ordinal",
            details=(
                "CUDA kernel errors might be asynchronously reported at some other API "
                "call, so the stacktrace below might be incorrect.",
                f"The launch needs {len(ordinals)} GPU(s) (tp_size x pp_size x dp_size) "
                f"at CUDA ordinals {sorted(set(ordinals))}, but only {len(visible)} "
                f"visible (CUDA_VISIBLE_DEVICES={cvd if cvd is not None else '<unset>'}).",
            ),
        )
    return tuple(visible[o] for o in ordinals)


def _free_mib(gpus: tuple[Gpu, ...], knobs: Knobs) -> list[float]:
    used: dict[str, int] = {}
    for usage in live_usages(knobs.state_dir):
        for uuid in usage.gpu_uuids:
            used[uuid] = used.get(uuid, 0) + usage.used_mib
    return [max(0.0, float(g.memory_total_mib - used.get(g.uuid, 0))) for g in gpus]


def _check_balance(
    settings: Mapping[str, Any], free: list[float], env: Mapping[str, str], log: LogAdapter
) -> None:
    if int(settings.get("tp_size") or 1) <= 1:
        return
    pre = min(free) / _GIB
    for local_mib in free:
        local = local_mib / _GIB
        if pre < local * 0.9:
            msg = (
                "The memory capacity is unbalanced. Some GPUs may be occupied by other "
                f"processes. pre_model_load_memory={pre}, local_gpu_memory={local}, "
                f"local_gpu_memory * 0.9={local * 0.9}"
            )
            if env.get("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "1").lower() in ("0", "false", "no", "n"):
                log.warning(msg)
                return
            raise StartupError("RuntimeError: " + msg)


def _check_architecture(model: ModelInfo, facts: Facts) -> None:
    if model.architecture in facts.architectures:
        return
    arch = model.architecture or "<none>"
    raise StartupError(
        f"ValueError: Cannot find model module. '{arch}' is not a registered model in "
        "the Transformers library (only relevant if the model is meant to be in "
        "Transformers) and 'AutoModel' is not present in the model config's 'auto_map' "
        "(relevant if the model is custom).",
        details=(
            f"Model architectures {list(model.architectures)} are not supported by "
            f"SGLang {facts.sglang_version} ({len(facts.architectures)} architectures are "
            "registered). Real SGLang tries the Transformers backend for unknown names "
            "and fails like this when Transformers does not know the class either.",
        ),
    )


def memory_error(
    settings: Mapping[str, Any], weights_mib: float, free_mib: float, fraction: float
) -> StartupError | None:
    """The failure loading the weights / sizing the KV cache would hit, if any."""
    gib = weights_mib / _GIB
    if weights_mib >= free_mib:
        return StartupError(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{min(gib, 1.0):.2f} GiB. GPU 0 has a total capacity of {free_mib / _GIB:.2f} "
            "GiB of which 0 bytes is free.",
            details=(
                f"Weights need {gib:.2f} GiB per GPU (checkpoint size / "
                f"(tp_size x pp_size)) but only {free_mib / _GIB:.2f} GiB is free per GPU.",
            ),
        )
    available = free_mib * fraction
    if weights_mib >= available:
        minimum = weights_mib / free_mib
        return StartupError(
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={settings.get('mem_fraction_static')}. Raise "
            f"--mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} "
            f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using "
            "speculative decoding, draft weights are now counted.",
            details=(
                f"Needed {gib:.2f} GiB of weights per GPU, available {available / _GIB:.2f} "
                f"GiB (= {free_mib / _GIB:.2f} GiB free x mem_fraction_static {fraction}).",
            ),
        )
    return None


def _gpu_failure(exc: GpuError) -> StartupError:
    return StartupError(
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you "
        "have an NVIDIA GPU and installed a driver from "
        "http://www.nvidia.com/Download/index.aspx",
        details=(f"Simulator: {exc} (set SGLANG_SIM_GPUS_FILE).",),
    )


@dataclass(frozen=True)
class Resolved:
    """The main process's view after ``ServerArgs.resolve_once``."""

    settings: dict[str, Any]
    model: ModelInfo
    inventory: Inventory
    memory: MemoryPlan
    # What the post-processing passes declared, in order (ServerArgs._resolved_overrides's leading entries).
    resolutions: tuple[tuple[str, dict[str, Any]], ...] = ()


def mamba_cap(settings: Mapping[str, Any], model: ModelInfo, tokens: int) -> RequestCap | None:
    """The running requests a hybrid gated-delta-net model's mamba state slots allow
    (cache_pools.resolve_max_num_reqs: kv_cache_configurator.py:1738-1750; recorded as 51 in
    tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/b200), where the flags size that cache; None for other
    models, and for a cache SGLang sizes from memory."""
    if not mamba_cache_size_given(settings):
        return None
    cap = resolve_max_num_reqs(settings, model, tokens)
    return cap if cap.mamba_cache_size is not None else None


def mamba_cache_error(cap: RequestCap | None) -> StartupError | None:
    """A mamba cache the flags size too small for one request (kv_cache_configurator.py:1753-1763), which real
    SGLang refuses where it sizes the KV cache."""
    if cap is None or cap.max_running_requests > 0:
        return None
    return StartupError(
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        f"max_mamba_cache_size={cap.mamba_cache_size}, mamba_ratio={cap.slots_per_request}, resulting "
        f"max_num_reqs={cap.max_running_requests}. Try: (1) reduce --max-running-requests, (2) increase "
        "--mem-fraction-static, or (3) use GPUs with more memory."
    )


_NOT_ALONE = "requires --ssl-{0} to be specified as well."
_NO_EFFECT = "has no effect without --ssl-certfile and --ssl-keyfile."


def check_ssl(settings: Mapping[str, Any]) -> None:
    """ServerArgs' SSL validation, early in __post_init__, before the model's config is read (0.5.17
    server_args.py ``_handle_ssl_validation``; 0.5.23 arg_groups/serving_hook.py ``handle_ssl_validation``,
    recorded in tests/recordings/smg-1.13.0-tls/): key and certificate go together; each file exists."""
    keyfile, certfile = settings.get("ssl_keyfile"), settings.get("ssl_certfile")
    ca_certs = settings.get("ssl_ca_certs")
    if keyfile and not certfile:
        raise StartupError("ValueError: --ssl-keyfile " + _NOT_ALONE.format("certfile"))
    if certfile and not keyfile:
        raise StartupError("ValueError: --ssl-certfile " + _NOT_ALONE.format("keyfile"))
    if not certfile and not keyfile:
        if ca_certs:
            raise StartupError("ValueError: --ssl-ca-certs " + _NO_EFFECT)
        if settings.get("ssl_keyfile_password"):
            raise StartupError("ValueError: --ssl-keyfile-password " + _NO_EFFECT)
    files = (
        (keyfile, "--ssl-keyfile", "SSL key file"),
        (certfile, "--ssl-certfile", "SSL certificate file"),
        (ca_certs, "--ssl-ca-certs", "SSL CA certificates file"),
    )
    for value, flag, what in files:
        if value and not os.path.isfile(str(value)):
            raise StartupError(f"ValueError: {what} not found: '{value}'. Please check the {flag} path.")


def resolve_launch(parsed: Mapping[str, Any], knobs: Knobs, facts: Facts, log: LogAdapter) -> Resolved:
    """Read the model config and resolve the arguments, or fail like SGLang."""
    settings = base_settings(parsed, facts)
    check_ssl(settings)
    model = load_model(str(settings["model_path"]))
    resolve_serving(settings, model.architecture)
    mamba = resolve_mamba_radix_cache(settings, model.architecture, gdn_shape(settings, model) is not None)
    resolutions = (("_mamba_radix_cache_resolution", mamba),) if mamba else ()
    try:
        inventory = load_inventory(knobs.gpus_file)
    except GpuError as exc:
        raise _gpu_failure(exc) from None
    memory = resolve_memory(settings, inventory.min_memory_mib())
    if knobs.ignore_speculative:
        settings["speculative_algorithm"] = None  # the silent failure
    resolve_speculative(settings, model.architecture, facts, log)
    return Resolved(settings, model, inventory, memory, resolutions)


def _capped_by_user(tokens: int, settings: Mapping[str, Any], log: LogAdapter) -> int:
    """``--max-total-tokens`` caps the KV pool the memory allows (mem_cache/kv_cache_configurator.py
    ``_apply_token_constraints``)."""
    user_limit = settings.get("max_total_tokens")
    if user_limit is None:
        return tokens
    if int(user_limit) > tokens:
        log.warning(
            "max_total_tokens=%d is larger than the profiled value %d. Use the profiled value instead.",
            int(user_limit),
            tokens,
        )
    return min(tokens, int(user_limit))


def place_launch(
    resolved: Resolved, knobs: Knobs, env: Mapping[str, str], facts: Facts, log: LogAdapter
) -> Plan:
    """The scheduler side: devices, model class, draft, memory budget."""
    settings, model, memory = resolved.settings, resolved.model, resolved.memory
    gpus = _pick_gpus(settings, resolved.inventory, env)
    free = _free_mib(gpus, knobs)
    _check_balance(settings, free, env, log)
    _check_architecture(model, facts)

    draft: ModelInfo | None = None
    draft_path = settings.get("speculative_draft_model_path")
    if settings.get("speculative_algorithm") in EAGLE_FAMILY and draft_path not in (None, model.path):
        draft = load_model(str(draft_path))

    tp = int(settings.get("tp_size") or 1)
    tp_pp = tp * int(settings.get("pp_size") or 1)
    weights_mib = (model.weights_mib + (draft.weights_mib if draft else 0.0)) / tp_pp
    free_mib = min(free)
    kv_mib = max(0.0, free_mib * memory.mem_fraction_static - weights_mib)
    tokens = _capped_by_user(int(kv_mib * (1 << 20) // model.kv_bytes_per_token(tp)), settings, log)
    mrr = settings.get("max_running_requests")
    algorithm = settings.get("speculative_algorithm")
    accept: float | None = None
    if algorithm:
        # No up-front check that the checkpoint holds a draft (real SGLang has none): the draft's kind sets
        # the acceptance (draft.py; recorded in tests/recordings/sglang-0.5.17-h200-nextn-without-mtp/).
        kind = draft_from_target(settings, model)
        accept = knobs.accept_length or accept_length_for(kind, settings, default_accept_length(settings))
        draft_tokens = settings.get("speculative_num_draft_tokens")
        if draft_tokens:
            accept = min(accept, float(draft_tokens))
    requests = int(mrr) if mrr else max(1, min(tokens // 2, 4096))
    cap = mamba_cap(settings, model, max(1, tokens))
    return Plan(
        settings=settings,
        model=model,
        draft=draft,
        inventory=resolved.inventory,
        gpus=gpus,
        memory=memory,
        free_mib=free_mib,
        weights_per_gpu_mib=weights_mib,
        used_mib=int(min(free_mib, free_mib * memory.mem_fraction_static + 1024)),
        max_total_num_tokens=max(1, tokens),
        max_running_requests=min(requests, cap.max_running_requests)
        if cap and cap.capped_by_mamba
        else requests,
        mamba_cap=cap,
        context_length=int(settings.get("context_length") or model.context_length),
        speculative_algorithm=algorithm,
        accept_length=accept,
        world_size=len(gpus),
        process_name="sglang::scheduler" + ("_TP0" if tp > 1 else ""),
        memory_error=memory_error(settings, weights_mib, free_mib, memory.mem_fraction_static)
        or mamba_cache_error(cap),
        resolutions=resolved.resolutions,
    )
