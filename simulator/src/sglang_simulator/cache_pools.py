"""Caches real SGLang 0.5.17 keeps besides the device KV pool, as far as its answers show them.

* The mamba state cache of hybrid models (gated delta net, Mamba2, short-conv layers beside attention):
  the models srt/configs/hybrid_arch.py ``mambaish_config`` picks. Their scheduler reads
  ``ServerArgs.mamba_cache_chunk_size`` (server_args.py: ``max(mamba_chunk_size of the config, else
  FLA_CHUNK_SIZE 64, page_size)``), which caches the value as ``_mamba_cache_chunk_size``, so it shows in
  ``/server_info`` ``internal_states`` (tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5: 64).
* The hierarchical cache's host pool (``--enable-hierarchical-cache``): srt/mem_cache/pool_host/base.py
  ``HostKVCache.__init__`` sizes it from ``--hicache-size`` GB (else ``--hicache-ratio`` times the device
  pool), in bytes per token of the MHA host pool (mha.py ``get_size_per_token``), plus one page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import ModelInfo

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


def hicache_host_tokens(settings: Mapping[str, Any], model: ModelInfo, device_tokens: int) -> int | None:
    """Token slots of the hierarchical cache's host pool; None without ``--enable-hierarchical-cache``.

    For a hybrid model real SGLang gives ``--hicache-size`` to the KV and the mamba host pools in proportion
    to their device pools (mem_cache/hybrid_cache/hybrid_pool_assembler.py ``_split_hicache_size``); the
    simulator sizes no mamba pool and gives the KV pool all of it."""
    if not settings.get("enable_hierarchical_cache"):
        return None
    page_size = max(1, int(settings.get("page_size") or 1))
    size_gb = float(settings.get("hicache_size") or 0)
    if size_gb > 0:
        tokens = int(size_gb * 1e9 // model.kv_bytes_per_token(int(settings.get("tp_size") or 1)))
    else:
        tokens = int(device_tokens * float(settings.get("hicache_ratio") or 2.0))
    return (tokens // page_size + 1) * page_size
