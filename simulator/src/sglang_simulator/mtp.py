"""Which tensors of the target checkpoint the draft head of EAGLE/NEXTN takes, read from SGLang
0.5.23's loaders.

The simulator's own reading, written from SGLang's source, not from sglang-fleet's (whose preflight
has a rule of its own; tests/contract/test_mtp_rules.py runs both on every checkpoint the tests
know). ``ModelConfig._config_draft_model`` (srt/configs/model_config.py) swaps the target's
architecture for its head class; each head's ``load_weights`` skips, without a word, every tensor
that is not its own:

* ``Qwen3_5ForCausalLMMTP`` (srt/models/qwen3_5_mtp.py), the head of Qwen3.5/3.6 and InternS2:
  "Only process MTP branch weights", ``if "mtp" not in name: continue``;
* ``MiMoMTP`` (mimo_mtp.py): ``re.match(r"model.mtp_layers.(\\d+).", name)`` becomes its
  ``mtp_block``;
* ``MiMoV2MTP`` (mimo_v2_nextn.py): ``re.match(r"model.mtp.layers.(\\d+).", name)`` (an unescaped
  ``.`` matches any character, so ``model.mtp_layers.0.`` too);
* the NextN heads that append a layer after the decoder's (deepseek_nextn.py ``ckpt_prefix``
  ``model.layers.{num_hidden_layers}``, step3p5_mtp.py, bailing_moe_nextn.py):
  ``model.layers.<num_hidden_layers>.``;
* any other head: any of these.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

QWEN3_5_HEAD = frozenset(
    {
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
    }
)
MIMO_V2_HEAD = frozenset({"MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})
APPENDED_LAYER_HEAD = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "Step3p5ForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
    }
)
_MIMO = re.compile(r"model.mtp_layers.(\d+).")
_MIMO_V2 = re.compile(r"model.mtp.layers.(\d+).")


def _qwen3_5(name: str, _: Any) -> bool:
    return "mtp" in name


def _mimo(name: str, _: Any) -> bool:
    return _MIMO.match(name) is not None


def _mimo_v2(name: str, _: Any) -> bool:
    return _MIMO_V2.match(name) is not None


def _appended_layer(name: str, num_hidden_layers: Any) -> bool:
    return isinstance(num_hidden_layers, int) and name.startswith(f"model.layers.{num_hidden_layers}.")


_HEADS: dict[str, Callable[[str, Any], bool]] = {
    **dict.fromkeys(QWEN3_5_HEAD, _qwen3_5),
    "MiMoForCausalLM": _mimo,
    **dict.fromkeys(MIMO_V2_HEAD, _mimo_v2),
    **dict.fromkeys(APPENDED_LAYER_HEAD, _appended_layer),
}
_ANY_HEAD = (_qwen3_5, _mimo, _mimo_v2, _appended_layer)


def head_takes(architecture: str, name: str, num_hidden_layers: Any) -> bool:
    """Whether the head class SGLang swaps in for `architecture` loads the checkpoint tensor `name`."""
    rule = _HEADS.get(architecture)
    rules = (rule,) if rule is not None else _ANY_HEAD
    return any(take(name, num_hidden_layers) for take in rules)


def has_head_tensors(architecture: str, tensor_names: Iterable[str], num_hidden_layers: Any) -> bool:
    """Whether the checkpoint holds a tensor the head of `architecture` loads (else it stays untrained)."""
    return any(head_takes(architecture, name, num_hidden_layers) for name in tensor_names)
