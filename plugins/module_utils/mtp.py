"""MTP (multi-token prediction) in a checkpoint: the draft layer NEXTN and EAGLE use without a draft model.

sglang-fleet's own rule. The SGLang simulator has its own, read from SGLang's loaders (simulator/.../mtp.py), and
tests/contract/test_mtp_rules.py runs both on every checkpoint the tests know, so neither can agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# MTP checkpoints carry their draft layer as `mtp.*` tensors and count it in one of these config keys.
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


def mtp_layers(config: Mapping[str, Any]) -> int:
    """MTP layers declared in config.json, at the top level or in text_config."""
    for scope in (config, config.get("text_config") or {}):
        for key in MTP_LAYER_KEYS:
            value = scope.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def has_mtp_tensors(tensor_names: Iterable[str], num_hidden_layers: Any = None) -> bool:
    """True when the checkpoint lists draft-layer tensors where SGLang's loaders take them from:
    `mtp.*` or `<prefix>.mtp.*` (Qwen3.5's MTP, sglang/srt/models/qwen3_5_mtp.py), `model.mtp_layers.*`
    (MiMo's, mimo_mtp.py), or the layer after the last one, `model.layers.<num_hidden_layers>.*` (DeepSeek's
    NextN, deepseek_nextn.py)."""
    extra_layer = f"model.layers.{num_hidden_layers}." if isinstance(num_hidden_layers, int) else None
    prefixes = ("mtp.", "model.mtp_layers.", *([extra_layer] if extra_layer else []))
    return any(name.startswith(prefixes) or ".mtp." in name for name in tensor_names)
