"""The slice of SGLang 0.5.23's argument resolution the simulator mimics.

Real SGLang resolves the parsed flags in ``ServerArgs.resolve_once`` (the
hooks of ``sglang/srt/arg_groups/``).  The simulator reproduces the parts a
deployment can observe or trip over:

* serving defaults (``serving_hook.py``): ``served_model_name`` and
  ``tokenizer_path`` default to ``model_path``;
* GPU memory (``memory_hook.handle_gpu_memory_settings``): chunked prefill
  size and decode CUDA-graph batch size by GPU memory tier, and the *auto*
  ``mem_fraction_static`` (simplified, see ``_auto_mem_fraction``);
* speculative decoding (``speculative_hook.py``): NEXTN is an alias reported
  as EAGLE; EAGLE/EAGLE3/STANDALONE pick (steps, topk, draft tokens)
  automatically when all three are unset, *assert* when only steps is unset,
  force draft tokens = steps + 1 when topk is 1, and cap
  ``max_running_requests`` at 48 when it is unset.

Everything else is reported as parsed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .errors import StartupError
from .facts import Facts

# speculative_hook._handle_eagle_family: these checkpoints carry their own
# NextN/MTP draft layer, so the draft path defaults to the target path.
DRAFT_IS_TARGET_ARCHS = frozenset(
    {
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "Qwen4ExpForConditionalGeneration",
    }
)
# speculative_hook._auto_choose_speculative_params: (steps, topk, draft tokens).
_AUTO_PARAMS_WIDE = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
SPEC_MAX_RUNNING_REQUESTS = 48


def resolve_serving(settings: dict[str, Any], architecture: str = "") -> None:
    if settings.get("tokenizer_path") is None:
        settings["tokenizer_path"] = settings["model_path"]
    if settings.get("served_model_name") is None:
        settings["served_model_name"] = settings["model_path"]
    # arg_groups/serving_hook.py: "auto" is round_robin, or follow_bootstrap_room for a PD prefill server.
    if settings.get("load_balance_method") == "auto":
        prefill = settings.get("disaggregation_mode") == "prefill"
        settings["load_balance_method"] = "follow_bootstrap_room" if prefill else "round_robin"
    # server_args.py resolve_encoder_transfer_backend (pd_disaggregation_hook.py).
    if settings.get("encoder_transfer_backend") == "auto":
        tp_size = int(settings.get("tp_size") or 1)
        kimi = architecture == "KimiK3ForConditionalGeneration" and tp_size > 1
        settings["encoder_transfer_backend"] = "zmq_to_tokenizer" if kimi else "zmq_to_scheduler"


# arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS (of them the simulator sizes Qwen3-Next and Qwen3.5).
_MAMBA_EXTRA_BUFFER_ARCHS = frozenset(
    {
        "KimiLinearForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
    }
)


def resolve_mamba_radix_cache(
    settings: dict[str, Any], architecture: str, hybrid: bool
) -> dict[str, Any] | None:
    """arg_groups/overrides.py _mamba_radix_cache_resolution: what it declares (also in
    ``_resolved_overrides``), applied to the settings; None for a model without a mamba radix cache."""
    if not hybrid or settings.get("disable_radix_cache"):
        return None
    declared: dict[str, Any] = {"uses_mamba_radix_cache": True}
    if settings.get("mamba_radix_cache_strategy") == "auto":
        wants_overlap = not settings.get("disable_overlap_schedule")
        page_size = settings.get("page_size")
        wants_paging = page_size is not None and int(page_size) > 1
        # supports_mamba_cache_extra_buffer
        triton = settings.get("linear_attn_backend") == "triton"
        supported = architecture in _MAMBA_EXTRA_BUFFER_ARCHS and triton
        if (wants_overlap or wants_paging) and supported:
            declared["mamba_radix_cache_strategy"] = "extra_buffer"
        else:
            declared["mamba_radix_cache_strategy"] = "no_buffer"
            declared["disable_overlap_schedule"] = True
    settings.update({key: value for key, value in declared.items() if key != "uses_mamba_radix_cache"})
    return declared


# ---------------------------------------------------------------------------
# Memory.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPlan:
    gpu_memory_mib: int | None
    chunked_prefill_size: int
    decode_max_bs: int
    mem_fraction_static: float
    mem_fraction_is_auto: bool
    reserved_mib: float


def _tier(gpu_mem: int | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda-graph max bs) by GPU memory."""
    gib = 1024
    if gpu_mem is None:
        return 4096, 160
    if gpu_mem < 20 * gib:
        return 2048, 8
    if gpu_mem < 35 * gib:
        return 4096, 48 if tp_size < 4 else 160
    if gpu_mem < 60 * gib:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mem < 160 * gib:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def _prefill_graph_sizes(max_bs: int) -> int:
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_bs)


def _auto_mem_fraction(
    gpu_mem: int | None, settings: dict[str, Any], chunked: int, decode_max_bs: int
) -> tuple[float, float]:
    """SGLang's default ``mem_fraction_static``, simplified.

    Real 0.5.23 reserves, in MiB: 512 + 1.5 x activation tokens (chunked
    prefill size, at least 2048) + tp*pp/8 GiB + CUDA-graph memory (2 MiB per
    decode batch size plus 8 MiB per captured prefill size) with a 10 GiB
    floor on GPUs over 60 GiB, and returns round((total - reserved) / total,
    3).  Left out: post-capture KV sizing, DP-attention padding, DeepEP
    buffers, disaggregated decode, XPU headroom and the VLM reduction.
    """
    if gpu_mem is None:
        return 0.95, 0.0
    activation_tokens = (
        max(chunked, 2048) if chunked > 0 else max(int(settings.get("max_prefill_tokens") or 0), 2048)
    )
    tp_pp = int(settings.get("tp_size") or 1) * int(settings.get("pp_size") or 1)
    reserved = 512 + activation_tokens * 1.5 + tp_pp / 8 * 1024
    reserved += decode_max_bs * 2 + _prefill_graph_sizes(chunked) * 8
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem - reserved) / gpu_mem, 3), reserved


def resolve_memory(settings: dict[str, Any], gpu_mem: int | None) -> MemoryPlan:
    tp_size = int(settings.get("tp_size") or 1)
    tier_chunked, tier_bs = _tier(gpu_mem, tp_size)
    chunked = settings.get("chunked_prefill_size")
    if chunked is None:
        chunked = tier_chunked
        settings["chunked_prefill_size"] = chunked
    graph_cfg = settings.get("cuda_graph_config") or {}
    explicit_bs = settings.get("cuda_graph_max_bs_decode") or graph_cfg.get("decode", {}).get("max_bs")
    decode_max_bs = int(explicit_bs) if explicit_bs else tier_bs
    mrr = settings.get("max_running_requests")
    if not explicit_bs and mrr is not None and decode_max_bs > mrr:
        decode_max_bs = int(mrr)
    fraction = settings.get("mem_fraction_static")
    reserved = 0.0
    is_auto = fraction is None
    if fraction is None:
        fraction, reserved = _auto_mem_fraction(gpu_mem, settings, int(chunked), decode_max_bs)
        settings["mem_fraction_static"] = fraction
    return MemoryPlan(
        gpu_memory_mib=gpu_mem,
        chunked_prefill_size=int(chunked),
        decode_max_bs=decode_max_bs,
        mem_fraction_static=float(fraction),
        mem_fraction_is_auto=is_auto,
        reserved_mib=reserved,
    )


# ---------------------------------------------------------------------------
# Speculative decoding.
# ---------------------------------------------------------------------------


def _auto_params(algorithm: str, architecture: str) -> tuple[int, int, int]:
    if algorithm != "STANDALONE" and architecture in _AUTO_PARAMS_WIDE:
        return 5, 4, 8
    return 3, 1, 4


def resolve_speculative(
    settings: dict[str, Any], architecture: str, facts: Facts, log: logging.LoggerAdapter[logging.Logger]
) -> None:
    """Apply ``handle_speculative_decoding`` for the EAGLE family."""
    requested = settings.get("speculative_algorithm")
    if settings.get("speculative_draft_model_path") and not settings.get("speculative_draft_model_revision"):
        settings["speculative_draft_model_revision"] = "main"
    if requested is None:
        return
    name = str(requested).upper()
    name = facts.speculative_algorithm_aliases.get(name, name)
    if name not in facts.speculative_algorithms:
        raise StartupError(f"ValueError: Unknown speculative algorithm name: {requested}")
    settings["speculative_algorithm"] = name
    if name in ("DFLASH", "DSPARK"):
        if settings.get("speculative_num_steps") not in (None, 1):
            log.warning(
                "%s only supports speculative_num_steps == 1; overriding speculative_num_steps=%s to 1.",
                name,
                settings["speculative_num_steps"],
            )
        settings["speculative_num_steps"] = 1
        return
    if name == "NGRAM":
        _resolve_ngram(settings, log)
        return
    if name not in EAGLE_FAMILY:
        return

    if settings.get("max_running_requests") is None:
        settings["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
        log.warning(
            "Max running requests is reset to 48 for speculative decoding. You can "
            "override this by explicitly setting --max-running-requests."
        )
    if architecture in DRAFT_IS_TARGET_ARCHS and settings.get("speculative_draft_model_path") is None:
        settings["speculative_draft_model_path"] = settings["model_path"]
        settings["speculative_draft_model_revision"] = settings.get("revision")

    steps = settings.get("speculative_num_steps")
    topk = settings.get("speculative_eagle_topk")
    draft = settings.get("speculative_num_draft_tokens")
    if not settings.get("speculative_adaptive") and steps is None:
        if topk is not None or draft is not None:
            raise StartupError(
                "AssertionError",
                details=(
                    "speculative_hook._handle_eagle_family asserts that "
                    "--speculative-eagle-topk and --speculative-num-draft-tokens are "
                    "unset when --speculative-num-steps is unset "
                    f"(got speculative_eagle_topk={topk}, "
                    f"speculative_num_draft_tokens={draft}). Set all three, or none "
                    "of them for the automatic choice.",
                ),
            )
        steps, topk, draft = _auto_params(name, architecture)
        settings["speculative_num_steps"] = steps
        settings["speculative_eagle_topk"] = topk
        settings["speculative_num_draft_tokens"] = draft
    if topk == 1 and steps is not None and draft != steps + 1:
        log.warning(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
            "when speculative_eagle_topk == 1"
        )
        settings["speculative_num_draft_tokens"] = steps + 1


def _resolve_ngram(settings: dict[str, Any], log: logging.LoggerAdapter[logging.Logger]) -> None:
    """``speculative_hook._handle_ngram`` (0.5.23; 0.5.17 answers the same, see tests/recordings/)."""
    if settings.get("max_running_requests") is None:
        settings["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
        log.warning(
            "Max running requests is reset to 48 for speculative decoding. You can "
            "override this by explicitly setting --max-running-requests."
        )
    settings["enable_mixed_chunk"] = False
    topk = int(settings.get("speculative_ngram_max_bfs_breadth") or 10)
    settings["speculative_eagle_topk"] = topk
    if settings.get("speculative_num_draft_tokens") is None:
        settings["speculative_num_draft_tokens"] = 12
        log.warning(
            "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
            "You can override this by explicitly setting --speculative-num-draft-tokens."
        )
    if settings.get("speculative_num_steps") is None:
        settings["speculative_num_steps"] = int(settings["speculative_num_draft_tokens"]) // topk
    log.warning("The mixed chunked prefill are disabled because of using ngram speculative decoding.")


def default_accept_length(settings: dict[str, Any]) -> float:
    """A plausible mean acceptance length (accepted drafts + bonus token)."""
    steps = int(settings.get("speculative_num_steps") or 1)
    draft = int(settings.get("speculative_num_draft_tokens") or steps + 1)
    return round(min(float(draft), 1.0 + 0.6 * steps), 3)
