"""The draft EAGLE/NEXTN use when no separate ``--speculative-draft-model-path`` is given.

Real SGLang (0.5.17 and 0.5.23 alike) never checks up front that the target checkpoint holds a draft:

* NEXTN is an alias of EAGLE (``arg_groups/speculative_hook.py`` ``_resolve_speculative_algorithm_alias``);
* the draft worker builds its ``ModelConfig`` from ``speculative_draft_model_path or model_path``
  (``managers/tp_worker.py`` ``_init_model_config``, ``configs/model_config.py`` ``from_server_args``);
* ``ModelConfig._config_draft_model`` swaps the architectures below for their MTP/NextN head class
  (``MiMoForCausalLM`` -> ``MiMoMTP``, ``Qwen3_5ForConditionalGeneration`` -> ``Qwen3_5ForCausalLMMTP``, ...);
  that head's ``load_weights`` takes only its own tensors from the checkpoint and skips the rest without a
  word, so a checkpoint without them leaves the head untrained;
* any other architecture is not swapped: the target model itself is loaded a second time as its own draft.

Recorded on an H200 with real SGLang 0.5.17 (tests/recordings/sglang-0.5.17-h200-nextn-without-mtp/): every
server started and served; NEXTN and EAGLE on a MiMo checkpoint without its MTP layer accepted nothing
(``accept len: 1.00, accept rate: 0.00``, ``avg_spec_accept_length`` 1.0, per request 256 tokens in 255 verify
steps), NEXTN on a Qwen3 checkpoint (no MTP class) drafted with the target itself (accept length 3.46 and 4.0,
average 3.66), and NEXTN on the MiMo checkpoint WITH its ``model.mtp_layers.*`` took that layer as the draft.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import ModelInfo

# Architectures that ModelConfig._config_draft_model turns into an MTP/NextN head class for the draft
# (the union of 0.5.17's and 0.5.23's lists; MIMO_V2_MODEL_ARCHS included).
MTP_HEAD_ARCHS = frozenset(
    {
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV4ForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeForCausalLM",
        "GigaChat35ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Glm5NextForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmOcrForConditionalGeneration",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "InklingForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "MiMoForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2ForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "Step3p5ForCausalLM",
        "Step3p7ForConditionalGeneration",
    }
)
# What the recording showed (see the module docstring).
UNTRAINED_HEAD_ACCEPT_LENGTH = 1.0  # every draft token rejected: accept len 1.00, accept rate 0.00
SELF_DRAFT_ACCEPT_PER_STEP = 0.9  # the target as its own draft: 3.46 to 4.0 with 3 steps (mean 3.66)

# The kinds of draft taken from the target checkpoint.
MTP_HEAD = "mtp_head"  # the checkpoint's MTP/NextN layer (or tensors the simulator cannot list)
UNTRAINED_HEAD = "untrained_mtp_head"  # an MTP head class whose tensors the checkpoint lacks
TARGET_AS_DRAFT = "target_as_draft"  # no MTP head class: the target loaded again as the draft


def draft_from_target(settings: Mapping[str, Any], model: ModelInfo) -> str | None:
    """What EAGLE/NEXTN draft with when the draft is the target checkpoint; None with a separate draft model
    (or without EAGLE/NEXTN)."""
    if settings.get("speculative_algorithm") != "EAGLE":
        return None
    if settings.get("speculative_draft_model_path") not in (None, model.path):
        return None
    if model.architecture not in MTP_HEAD_ARCHS:
        return TARGET_AS_DRAFT
    # The names the head's loader takes (mtp.py, read from SGLang's model files).
    return UNTRAINED_HEAD if model.has_mtp_weights() is False else MTP_HEAD


def accept_length_for(kind: str | None, settings: Mapping[str, Any], default: float) -> float:
    """The mean acceptance length the draft kind gives (`default` for a trained draft)."""
    if kind == UNTRAINED_HEAD:
        return UNTRAINED_HEAD_ACCEPT_LENGTH
    if kind == TARGET_AS_DRAFT:
        steps = int(settings.get("speculative_num_steps") or 1)
        return round(1.0 + SELF_DRAFT_ACCEPT_PER_STEP * steps, 3)
    return default
