"""What the simulator reads from a model directory (it never loads tensors).

* ``config.json``: architecture (``architectures[0]``, else
  ``text_config.architectures[0]``), model type, context length, and the
  attention shape used to estimate the KV cache;
* weight size: ``model.safetensors.index.json`` ``metadata.total_size``, else
  the sum of the ``*.safetensors`` file sizes (sparse files are fine);
* tensor names: the index ``weight_map`` (else the safetensors headers), to
  tell whether the checkpoint carries MTP (next-token-prediction) layers;
* the tokenizer directory (``--tokenizer-path``, else the model's): whether it
  has the image processor a multimodal architecture needs at start
  (``preprocessor_config.json``) and a chat template (``chat_template.jinja``,
  or ``chat_template`` in ``tokenizer_config.json``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import StartupError
from .mtp import has_head_tensors

_MIB = 1 << 20


@dataclass(frozen=True)
class ModelInfo:
    path: str
    config: dict[str, Any]
    text_config: dict[str, Any]
    architectures: tuple[str, ...]
    architecture: str
    model_type: str | None
    weights_bytes: int
    tensor_names: frozenset[str] | None
    has_vision: bool
    generation_config: dict[str, Any] = field(default_factory=dict)

    @property
    def weights_mib(self) -> float:
        return self.weights_bytes / _MIB

    @property
    def context_length(self) -> int:
        for cfg in (self.text_config, self.config):
            value = cfg.get("max_position_embeddings")
            if isinstance(value, int) and value > 0:
                return value
        return 4096

    @property
    def eos_token_id(self) -> int:
        """The first EOS id of generation_config.json, else config.json's (real SGLang 0.5.17 answered
        generation_config.json's first id as matched_stop)."""
        for cfg in (self.generation_config, self.config, self.text_config):
            value = cfg.get("eos_token_id")
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, int):
                return value
        return 2

    def has_mtp_weights(self) -> bool | None:
        """Whether the draft head of this architecture finds its tensors (mtp.py, from SGLang's
        loaders); None when the tensor names are unknown."""
        if self.tensor_names is None:
            return None
        layers = self.text_config.get("num_hidden_layers")
        return has_head_tensors(self.architecture, self.tensor_names, layers)

    def kv_bytes_per_token(self, tp_size: int) -> int:
        """Rough bf16 KV-cache bytes per token and TP rank."""
        cfg = self.text_config
        layers = cfg.get("num_hidden_layers")
        heads = cfg.get("num_attention_heads")
        if not isinstance(layers, int) or not isinstance(heads, int) or heads <= 0:
            return 64 * 1024
        kv_heads = cfg.get("num_key_value_heads") or heads
        head_dim = cfg.get("head_dim") or (cfg.get("hidden_size", 4096) // heads)
        layer_types = cfg.get("layer_types")
        interval = cfg.get("full_attention_interval")
        if isinstance(layer_types, list) and layer_types:
            layers = sum(1 for t in layer_types if t == "full_attention") or layers
        elif isinstance(interval, int) and interval > 1:
            layers = max(1, layers // interval)
        kv_heads_per_rank = max(1, int(kv_heads) // max(1, tp_size))
        return max(1, 2 * layers * kv_heads_per_rank * int(head_dim) * 2)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StartupError(f"OSError: cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise StartupError(f"ValueError: {path} does not hold a JSON object")
    return data


def _safetensors_names(path: Path) -> set[str] | None:
    try:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if not 0 < length < 100 * _MIB:
                return None
            header = json.loads(fh.read(length))
    except (OSError, ValueError, struct.error):
        return None
    if not isinstance(header, dict):
        return None
    return {k for k in header if k != "__metadata__"}


def _weights(directory: Path) -> tuple[int, frozenset[str] | None]:
    index_path = directory / "model.safetensors.index.json"
    shards = sorted(directory.glob("*.safetensors"))
    if index_path.is_file():
        index = _read_json(index_path)
        weight_map = index.get("weight_map")
        names = frozenset(weight_map) if isinstance(weight_map, dict) else None
        total = index.get("metadata", {}).get("total_size")
        if isinstance(total, (int, float)) and total > 0:
            return int(total), names
        return sum(p.stat().st_size for p in shards), names
    if not shards:
        raise StartupError(f"RuntimeError: Cannot find any model weights with `{directory}`")
    names_union: set[str] = set()
    for shard in shards:
        shard_names = _safetensors_names(shard)
        if shard_names is None:
            return sum(p.stat().st_size for p in shards), None
        names_union |= shard_names
    return sum(p.stat().st_size for p in shards), frozenset(names_union)


def _architectures(config: dict[str, Any], text_config: dict[str, Any]) -> tuple[str, ...]:
    for cfg in (config, text_config):
        archs = cfg.get("architectures")
        if isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs):
            return tuple(archs)
    return ()


def load_model(model_path: str) -> ModelInfo:
    """Read a local model directory like ``ModelConfig`` would, or fail like it."""
    directory = Path(model_path)
    if not directory.is_dir():
        raise StartupError(
            f"OSError: {model_path} is not a local directory. Real SGLang would treat "
            "it as a Hugging Face repo id and try to download it; the simulator never "
            "downloads anything."
        )
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise StartupError(
            f"OSError: {model_path} does not appear to have a file named config.json. "
            f"Checkout 'https://huggingface.co/{model_path}/tree/main' for available files."
        )
    config = _read_json(config_path)
    text_config = config.get("text_config")
    if not isinstance(text_config, dict):
        text_config = config
    architectures = _architectures(config, text_config)
    weights_bytes, names = _weights(directory)
    model_type = config.get("model_type")
    return ModelInfo(
        path=model_path,
        config=config,
        text_config=text_config,
        architectures=architectures,
        architecture=architectures[0] if architectures else "",
        model_type=model_type if isinstance(model_type, str) else None,
        weights_bytes=weights_bytes,
        tensor_names=names,
        has_vision=isinstance(config.get("vision_config"), dict),
        generation_config=_read_json(generation)
        if (generation := directory / "generation_config.json").is_file()
        else {},
    )


@dataclass(frozen=True)
class TokenizerFiles:
    """What transformers finds in a tokenizer directory, as far as SGLang's start depends on it."""

    path: str
    has_image_processor: bool
    has_chat_template: bool


def tokenizer_files(tokenizer_path: str) -> TokenizerFiles:
    directory = Path(tokenizer_path)
    template = (directory / "chat_template.jinja").is_file()
    if not template and (directory / "tokenizer_config.json").is_file():
        try:
            template = bool(
                json.loads((directory / "tokenizer_config.json").read_text()).get("chat_template")
            )
        except (OSError, ValueError, AttributeError):
            template = False
    return TokenizerFiles(tokenizer_path, (directory / "preprocessor_config.json").is_file(), template)


def image_processor_error(tokenizer_path: str) -> str:
    """transformers' OSError when SGLang builds a multimodal model's processor from a directory
    without one."""
    return (
        f"OSError: Can't load image processor for '{tokenizer_path}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same "
        f"name. Otherwise, make sure '{tokenizer_path}' is the correct path to a directory containing a "
        "preprocessor_config.json file"
    )


CHAT_TEMPLATE_MISSING = (
    "Cannot use chat template functions because tokenizer.chat_template is not set and no template "
    "argument was passed! For information about writing templates and setting the "
    "tokenizer.chat_template attribute, please see the documentation at "
    "https://huggingface.co/docs/transformers/main/en/chat_templating"
)
