"""MTP (multi-token prediction) in a checkpoint: the draft layer NEXTN and EAGLE use when no draft model is given."""

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


def has_mtp_tensors(tensor_names: Iterable[str]) -> bool:
    """True when the checkpoint's index lists MTP tensors (`mtp.*`, or `<prefix>.mtp.*`)."""
    return any(name.startswith("mtp.") or ".mtp." in name for name in tensor_names)
