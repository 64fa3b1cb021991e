"""Caches real SGLang 0.5.17 keeps besides the device KV pool, as far as its answers show them.

* The mamba state cache of hybrid models (gated delta net, Mamba2, short-conv layers beside attention):
  the models srt/configs/hybrid_arch.py ``mambaish_config`` picks. Their scheduler reads
  ``ServerArgs.mamba_cache_chunk_size`` (server_args.py: ``max(mamba_chunk_size of the config, else
  FLA_CHUNK_SIZE 64, page_size)``), which caches the value as ``_mamba_cache_chunk_size``, so it shows in
  ``/server_info`` ``internal_states`` (tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5: 64).
* The hierarchical cache's host pools (``--enable-hierarchical-cache``): srt/mem_cache/pool_host/base.py
  ``HostKVCache.__init__`` sizes the KV host pool from ``--hicache-size`` GB (else ``--hicache-ratio`` times
  the device pool), in bytes per token of the MHA host pool (mha.py ``get_size_per_token``), plus one page.
  For a hybrid gated-delta-net model (Qwen3-Next, Qwen3.5) the GB are first split between the KV and the
  mamba host pools in proportion to their device pools' bytes (hybrid_cache/hybrid_pool_assembler.py
  ``_split_hicache_size``), and the draft's host pool gets the target host pool's slot count plus a page
  (kv_cache_builder.py ``maybe_register_hicache_draft``). Recorded in
  tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/b200 (the arithmetic below reproduces every figure there).

Line numbers cite SGLang 0.5.17's sglang/srt/ (unpacked at .hardware-cache/site/sglang/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .draft import MTP_HEAD, UNTRAINED_HEAD, draft_from_target
from .model import ModelInfo
from .resolve import EAGLE_FAMILY

FLA_CHUNK_SIZE = 64  # sglang/kernels/ops/attention/fla/chunk_delta_h.py CHUNK_SIZE

# model_type (of config.json or its text_config) -> chunk size when the config sets no mamba_chunk_size:
# the config classes hybrid_arch.py names, with their own defaults (configs/*.py).
_MAMBA_CHUNK_SIZE_DEFAULTS = {
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"), FLA_CHUNK_SIZE
    ),
    **dict.fromkeys(("intern_s2_preview", "jet_nemotron", "jet_vlm", "kimi_linear"), FLA_CHUNK_SIZE),
    "bailing_hybrid": FLA_CHUNK_SIZE,
    **dict.fromkeys(("falcon_h1", "nemotron_h", "nemotron_h_puzzle"), 256),
}
# Their config classes answer mamba_chunk_size 1 whatever config.json says (lfm2*.py, zaya.py).
_UNCHUNKED = frozenset({"lfm2", "lfm2_moe", "lfm2_vl", "zaya"})


def mamba_cache_chunk_size(model: ModelInfo, page_size: int) -> int | None:
    """``_mamba_cache_chunk_size`` of a model with a mamba state cache; None for the others."""
    types = {model.config.get("model_type"), model.text_config.get("model_type")}
    if types & _UNCHUNKED:
        return max(1, page_size)
    default = next((_MAMBA_CHUNK_SIZE_DEFAULTS[t] for t in types if t in _MAMBA_CHUNK_SIZE_DEFAULTS), None)
    if default is None:
        return None
    configured = model.config.get("mamba_chunk_size")
    chunk_size = configured if isinstance(configured, int) and configured > 0 else default
    return max(chunk_size, page_size)


GB = 1 << 30  # mem_cache/memory_pool.py:103, the device pools' log lines
KV_ITEMSIZE = 2  # bf16 KV cache (--kv-cache-dtype auto on a bf16 model)
CONV_ITEMSIZE = 2  # configs/mamba_utils.py:72 SGLANG_MAMBA_CONV_DTYPE, bfloat16 by default
_SSM_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
# mem_cache/kv_cache_configurator.py:118-123: mamba state slots a request may hold.
MAMBA_SLOTS_BASE = 3
MAMBA_SLOTS_EXTRA_BUFFER_OVERLAP = 2
MAMBA_SLOTS_EXTRA_BUFFER_OVERLAP_LAZY = 1
MAMBA_SLOTS_EXTRA_BUFFER_NO_OVERLAP = 1
# model_type (of config.json or its text_config) whose config class is configs/qwen3_next.py Qwen3NextConfig
# (Qwen3_5TextConfig and Qwen3_5MoeTextConfig derive from it): its mamba2_cache_params sizes the pools below.
_GDN_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})


@dataclass(frozen=True)
class GdnShape:
    """One attention-TP rank's cache shapes of a hybrid gated-delta-net model (configs/qwen3_next.py)."""

    full_layers: int  # full_attention_layer_ids: (layer + 1) % full_attention_interval == 0 (:260-285)
    mamba_layers: int  # linear_layer_ids, the other layers
    kv_heads: int  # per rank: max(1, num_key_value_heads // attn_tp), like ModelConfig.get_num_kv_heads
    head_dim: int
    # Mamba2StateShape.create (configs/mamba_utils.py:189-237): conv state (conv_dim, kernel - 1)
    conv_dim: int
    conv_window: int
    temporal: tuple[int, int, int]  # (value heads, value head dim, key head dim) per rank
    ssm_itemsize: int  # configs/mamba_utils.py:47-119: --mamba-ssm-dtype, else the config's, else float32

    @property
    def kv_bytes_per_token(self) -> int:
        """pool_host/mha.py:127-131 ``get_size_per_token``: head_dim * heads * layers * itemsize * 2."""
        return self.head_dim * self.kv_heads * self.full_layers * KV_ITEMSIZE * 2

    @property
    def conv_slot_bytes(self) -> int:
        return self.conv_dim * self.conv_window * CONV_ITEMSIZE * self.mamba_layers

    @property
    def temporal_slot_bytes(self) -> int:
        heads, v_dim, k_dim = self.temporal
        return heads * v_dim * k_dim * self.ssm_itemsize * self.mamba_layers

    @property
    def mamba_slot_bytes(self) -> int:
        """One state slot, every mamba layer: ``BaseLinearStateParams.mamba_cache_per_req``
        (configs/mamba_utils.py) and ``MambaPoolHost.get_size_per_token`` (memory_pool_host.py:296-302)."""
        return self.conv_slot_bytes + self.temporal_slot_bytes


def _int(cfg: Mapping[str, Any], key: str, default: int) -> int:
    value = cfg.get(key)
    return value if isinstance(value, int) and value > 0 else default


def gdn_shape(settings: Mapping[str, Any], model: ModelInfo) -> GdnShape | None:
    """The shapes of a Qwen3-Next / Qwen3.5 model (defaults: Qwen3NextConfig's); None for other models."""
    if not {model.config.get("model_type"), model.text_config.get("model_type")} & _GDN_TYPES:
        return None
    cfg = model.text_config
    layers = _int(cfg, "num_hidden_layers", 48)
    interval = cfg.get("full_attention_interval")
    layer_types = cfg.get("layer_types")
    if isinstance(interval, int) and interval > 0:
        full = sum(1 for layer in range(layers) if (layer + 1) % interval == 0)
    elif isinstance(layer_types, list):
        full = sum(1 for kind in layer_types[:layers] if kind == "full_attention")
    else:
        full = layers // 4
    dp = int(settings.get("dp_size") or 1) if settings.get("enable_dp_attention") else 1
    attn_tp = max(1, int(settings.get("tp_size") or 1) // dp)
    k_heads, v_heads = _int(cfg, "linear_num_key_heads", 16), _int(cfg, "linear_num_value_heads", 32)
    k_dim, v_dim = _int(cfg, "linear_key_head_dim", 128), _int(cfg, "linear_value_head_dim", 128)
    groups = k_heads if k_heads % attn_tp == 0 else attn_tp  # extra_groups_for_head_shards
    ssm_dtype = settings.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_dtype") or "float32"
    return GdnShape(
        full_layers=full,
        mamba_layers=layers - full,
        kv_heads=max(1, _int(cfg, "num_key_value_heads", 2) // attn_tp),
        head_dim=_int(cfg, "head_dim", 256),
        conv_dim=(v_dim * v_heads + 2 * groups * k_dim) // attn_tp,
        conv_window=_int(cfg, "linear_conv_kernel_dim", 4) - 1,
        temporal=(v_heads // attn_tp, v_dim, k_dim),
        ssm_itemsize=_SSM_ITEMSIZE.get(str(ssm_dtype), 4),
    )


def mamba_slots_per_request(settings: Mapping[str, Any]) -> int:
    """kv_cache_configurator.py:1659-1684 ``_calculate_mamba_ratio`` (without
    SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK)."""
    if settings.get("disable_radix_cache"):
        return 1
    strategy = settings.get("mamba_radix_cache_strategy")
    if strategy not in ("extra_buffer", "extra_buffer_lazy"):  # server_args.py:8636 enable_mamba_extra_buffer
        return MAMBA_SLOTS_BASE
    if settings.get("disable_overlap_schedule"):
        return MAMBA_SLOTS_BASE + MAMBA_SLOTS_EXTRA_BUFFER_NO_OVERLAP
    if strategy == "extra_buffer_lazy":
        return MAMBA_SLOTS_BASE + MAMBA_SLOTS_EXTRA_BUFFER_OVERLAP_LAZY
    return MAMBA_SLOTS_BASE + MAMBA_SLOTS_EXTRA_BUFFER_OVERLAP


def _attn_dp(settings: Mapping[str, Any]) -> int:
    return int(settings.get("dp_size") or 1) if settings.get("enable_dp_attention") else 1


def max_mamba_cache_size(settings: Mapping[str, Any], shape: GdnShape, device_tokens: int) -> int:
    """The device mamba pool's slots (kv_cache_configurator.py:1874-1957): ``--max-mamba-cache-size``; with
    the radix cache disabled, ``--max-running-requests``; else SGLang solves for it in the memory left after
    the weights, of which ``--mamba-full-memory-ratio`` goes to the states. The simulator has no memory
    profile: it takes the device KV pool's bytes as the rest's KV share (an estimate, unlike the two explicit
    cases)."""
    explicit = settings.get("max_mamba_cache_size")
    if explicit is not None:
        return int(explicit) // _attn_dp(settings)
    mrr = settings.get("max_running_requests")
    if settings.get("disable_radix_cache") and mrr is not None:
        return int(mrr) // _attn_dp(settings)
    budget = device_tokens * shape.kv_bytes_per_token * float(settings.get("mamba_full_memory_ratio") or 0.9)
    per_req = shape.mamba_slot_bytes
    draft_tokens = settings.get("speculative_num_draft_tokens")
    if settings.get("speculative_algorithm") and draft_tokens:
        d = int(draft_tokens)
        return max(
            1, int((budget - per_req * (1 + d)) // (per_req * (1 + d / mamba_slots_per_request(settings))))
        )
    return max(1, int((budget - per_req) // per_req))


def mamba_cache_size_given(settings: Mapping[str, Any]) -> bool:
    """Whether the mamba pool's size follows from the flags alone (``--max-mamba-cache-size``, or
    ``--max-running-requests`` with the radix cache disabled), not from a memory profile the simulator
    only estimates: only then does it cap the running requests (checks.py) and log the cap."""
    return settings.get("max_mamba_cache_size") is not None or bool(
        settings.get("disable_radix_cache") and settings.get("max_running_requests") is not None
    )


@dataclass(frozen=True)
class RequestCap:
    max_running_requests: int
    capped_by_mamba: bool  # max_mamba_cache_size // slots per request was below the other limits
    slots_per_request: int
    mamba_cache_size: int | None  # None: the model has no mamba cache

    def warning(self) -> str | None:
        """kv_cache_configurator.py:1738-1750, logged when the mamba cache lowers the request count."""
        if not self.capped_by_mamba:
            return None
        return (
            f"max_running_requests is capped to {self.max_running_requests} by the mamba state cache "
            f"(max_mamba_cache_size={self.mamba_cache_size}, {self.slots_per_request} state slots per "
            "request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve "
            "the state size with --mamba-ssm-dtype bfloat16."
        )


def resolve_max_num_reqs(settings: Mapping[str, Any], model: ModelInfo, device_tokens: int) -> RequestCap:
    """kv_cache_configurator.py:1719-1770 ``resolve_max_num_reqs``: one DP worker's concurrent requests."""
    context_len = int(settings.get("context_length") or model.context_length)
    estimated = max(min(int(device_tokens / context_len * 512), 4096), 2048)
    mrr = settings.get("max_running_requests")
    requested = int(mrr) // _attn_dp(settings) if mrr is not None else estimated
    max_num_reqs = min(requested, device_tokens // 2)
    shape = gdn_shape(settings, model)
    slots = mamba_slots_per_request(settings)
    if shape is None:
        return RequestCap(max_num_reqs, False, slots, None)
    size = max_mamba_cache_size(settings, shape, device_tokens)
    cap = size // slots
    return RequestCap(min(max_num_reqs, cap), cap < max_num_reqs, slots, size)


@dataclass(frozen=True)
class MambaPoolSizes:
    """The device mamba pool (memory_pool.py:457-860 ``MambaPool.__init__``), bytes of each buffer."""

    size: int
    conv: int  # (mamba layers, size + 1, conv_dim, kernel - 1), :540-546
    temporal: int  # (mamba layers, size + 1, *temporal), :563-567
    intermediate_ssm: int  # with speculative decoding: (layers, spec_state_size + 1, draft tokens, *temporal)
    # its conv windows as allocated: deduplicated for a linear draft chain (:426-456), else dense (:752-767)
    intermediate_conv: int
    # and by their shape: (layers, spec_state_size + 1, draft tokens, conv_dim, kernel - 1)
    intermediate_conv_logical: int
    speculative: bool

    @property
    def size_bytes(self) -> int:
        """memory_pool.py:1132 ``get_kv_size_bytes`` = ``State.mem_usage_bytes`` (:374-379): the size of every
        state tensor by its shape, so the deduplicated conv windows count at their logical size."""
        return self.conv + self.temporal + self.intermediate_ssm + self.intermediate_conv_logical

    def log_line(self) -> str:
        """memory_pool.py:786-799, without speculative decoding :809-813 (the trailing space included)."""
        line = (
            f"Mamba Cache is allocated. max_mamba_cache_size: {self.size}, "
            f"conv_state size: {self.conv / GB:.2f}GB, ssm_state size: {self.temporal / GB:.2f}GB "
        )
        if self.speculative:
            line += (
                f"intermediate_ssm_state_cache size: {self.intermediate_ssm / GB:.2f}GB "
                f"intermediate_conv_window_cache size: {self.intermediate_conv / GB:.2f}GB "
            )
        return line


def mamba_pool_sizes(
    settings: Mapping[str, Any], model: ModelInfo, device_tokens: int
) -> MambaPoolSizes | None:
    """The target's mamba pool: ``max_mamba_cache_size`` state slots, plus speculative scratch for
    ``mamba_spec_state_size`` = the resolved max running requests (kv_cache_configurator.py:777-780)."""
    shape = gdn_shape(settings, model)
    if shape is None:
        return None
    cap = resolve_max_num_reqs(settings, model, device_tokens)
    size = cap.mamba_cache_size or 0
    draft_tokens = (
        int(settings.get("speculative_num_draft_tokens") or 0) if settings.get("speculative_algorithm") else 0
    )
    spec_slots = cap.max_running_requests + 1
    topk = settings.get("speculative_eagle_topk")
    dedup = topk is None or int(topk) <= 1  # memory_pool.py:117-132 conv_window_dedup_enabled (CUDA, not KDA)
    window_columns = draft_tokens + shape.conv_window - 1 if dedup else draft_tokens * shape.conv_window
    conv_row = shape.conv_dim * CONV_ITEMSIZE * shape.mamba_layers
    return MambaPoolSizes(
        size=size,
        conv=(size + 1) * shape.conv_slot_bytes,
        temporal=(size + 1) * shape.temporal_slot_bytes,
        intermediate_ssm=spec_slots * draft_tokens * shape.temporal_slot_bytes,
        intermediate_conv=spec_slots * window_columns * conv_row if draft_tokens else 0,
        intermediate_conv_logical=spec_slots * draft_tokens * shape.conv_slot_bytes,
        speculative=draft_tokens > 0,
    )


def kv_cache_line(tokens: int, k_bytes: int, v_bytes: int) -> str:
    """memory_pool.py:1655-1681 ``_finalize_allocation_log`` for an MHA pool (bf16)."""
    return (
        f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, "
        f"K size: {k_bytes / GB:.2f} GB, V size: {v_bytes / GB:.2f} GB"
    )


def _page_size(settings: Mapping[str, Any]) -> int:
    return max(1, int(settings.get("page_size") or 1))


def _kv_device_bytes(shape: GdnShape, device_tokens: int, page_size: int, layers: int) -> int:
    """K (or V) bytes of an MHA pool: ``layers`` buffers of (size + page_size, heads, head_dim)
    (memory_pool.py:2025-2036 ``_kv_buffer_shapes``)."""
    return (device_tokens + page_size) * shape.kv_heads * shape.head_dim * KV_ITEMSIZE * layers


def _draft_kv_layers(settings: Mapping[str, Any], model: ModelInfo, shape: GdnShape) -> int | None:
    """Full-attention layers of the draft's KV pool: the MTP head, one layer (configs/model_config.py:668-676
    sets ``num_nextn_predict_layers = 1`` for the Qwen3.5 / Qwen3-Next heads); None without a draft worker, or
    with a separate draft checkpoint the simulator does not read here."""
    if settings.get("speculative_algorithm") not in EAGLE_FAMILY:
        return None
    kind = draft_from_target(settings, model)
    if kind in (MTP_HEAD, UNTRAINED_HEAD):
        return 1
    return shape.full_layers if kind is not None else None


def kv_cache_lines(settings: Mapping[str, Any], model: ModelInfo, device_tokens: int) -> list[str] | None:
    """The target's, then the draft's "KV Cache is allocated" lines of a hybrid GDN model; None for others."""
    shape = gdn_shape(settings, model)
    if shape is None:
        return None
    page = _page_size(settings)
    target = _kv_device_bytes(shape, device_tokens, page, shape.full_layers)
    lines = [kv_cache_line(device_tokens, target, target)]
    draft_layers = _draft_kv_layers(settings, model, shape)
    if draft_layers is not None:
        draft = _kv_device_bytes(shape, device_tokens, page, draft_layers)
        lines.append(kv_cache_line(device_tokens, draft, draft))
    return lines


@dataclass(frozen=True)
class HostPools:
    """The hierarchical cache's host pools: token slots and bytes of each."""

    kv_tokens: int
    kv_bytes: int
    layout: str
    mamba_slots: int | None = None  # hybrid models: the mamba host pool
    mamba_bytes: int | None = None
    draft_tokens: int | None = None  # speculative decoding: the draft's KV host pool
    draft_bytes: int | None = None

    def log_lines(self) -> list[str]:
        """pool_host/base.py:153-158, memory_pool_host.py:134-138 and managers/cache_controller.py:851-857, in
        the order real SGLang logs them (the draft's after the tree cache is built)."""
        lines = [
            f"Allocating kv hierarchical KV host pool: {self.kv_tokens} tokens, "
            f"{self.kv_bytes / 1e9:.2f} GB host memory."
        ]
        if self.mamba_bytes is not None:
            lines.append(
                f"Allocating {self.mamba_bytes / 1e9:.2f} GB host memory for hierarchical Mamba cache "
                f"(layout={self.layout})."
            )
        if self.draft_tokens is not None and self.draft_bytes is not None:
            lines.append(
                f"Allocating draft hierarchical KV host pool: {self.draft_tokens} tokens, "
                f"{self.draft_bytes / 1e9:.2f} GB host memory."
            )
            lines.append(f"HiCache draft KV registered: MHATokenToKVPool (host {self.draft_tokens} slots)")
        return lines


def _host_slots(host_size: float, size_per_token: int, device_size: int, ratio: float, page_size: int) -> int:
    """pool_host/base.py:119-127 (memory_pool_host.py:104-113 for the mamba pool, page size 1):
    ``--hicache-size`` GB over the bytes per slot, else ``--hicache-ratio`` times the device pool, aligned up
    by one page."""
    size = int(host_size * 1e9 // size_per_token) if host_size > 0 else int(device_size * ratio)
    return (size // page_size + 1) * page_size


def hicache_host_pools(settings: Mapping[str, Any], model: ModelInfo, device_tokens: int) -> HostPools | None:
    """The host pools real SGLang allocates; None without ``--enable-hierarchical-cache``.

    Models other than the hybrid GDN ones get the MHA pool of ``ModelInfo.kv_bytes_per_token`` and all of
    ``--hicache-size`` (a hybrid of another family would split it with its mamba pool, which the simulator
    does not size)."""
    if not settings.get("enable_hierarchical_cache"):
        return None
    page = _page_size(settings)
    host_size = float(settings.get("hicache_size") or 0)
    ratio = float(settings.get("hicache_ratio") or 2.0)
    layout = str(settings.get("hicache_mem_layout") or "layer_first")
    shape = gdn_shape(settings, model)
    if shape is None:
        per_token = model.kv_bytes_per_token(int(settings.get("tp_size") or 1))
        tokens = _host_slots(host_size, per_token, device_tokens, ratio, page)
        return HostPools(tokens, tokens * per_token, layout)
    mamba = mamba_pool_sizes(settings, model, device_tokens)
    assert mamba is not None
    kv_device = 2 * _kv_device_bytes(shape, device_tokens, page, shape.full_layers)
    kv_host_size, mamba_host_size = host_size, 0.0
    if host_size > 0:  # hybrid_pool_assembler.py:568-572 and :97-110 _split_hicache_size
        total = kv_device + mamba.size_bytes
        kv_host_size = host_size * kv_device / total
        mamba_host_size = host_size * mamba.size_bytes / total
    tokens = _host_slots(kv_host_size, shape.kv_bytes_per_token, device_tokens, ratio, page)
    slots = _host_slots(mamba_host_size, shape.mamba_slot_bytes, mamba.size, ratio, 1)
    pools = HostPools(
        kv_tokens=tokens,
        kv_bytes=tokens * shape.kv_bytes_per_token,
        layout=layout,
        mamba_slots=slots,
        mamba_bytes=slots * shape.mamba_slot_bytes,
    )
    draft_layers = _draft_kv_layers(settings, model, shape)
    if draft_layers is None:
        return pools
    # kv_cache_builder.py:102-116: the draft pool (as large as the target's) gets the target host pool's slot
    # count as a ratio and no --hicache-size, so base.py aligns it up by one more page.
    draft_tokens = _host_slots(0, 1, device_tokens, tokens / device_tokens, page)
    draft_per_token = shape.head_dim * shape.kv_heads * draft_layers * KV_ITEMSIZE * 2
    return replace(pools, draft_tokens=draft_tokens, draft_bytes=draft_tokens * draft_per_token)


def hicache_host_tokens(settings: Mapping[str, Any], model: ModelInfo, device_tokens: int) -> int | None:
    """Token slots of the KV host pool (``sglang:hicache_host_total_tokens``); None without
    ``--enable-hierarchical-cache``."""
    pools = hicache_host_pools(settings, model, device_tokens)
    return None if pools is None else pools.kv_tokens
