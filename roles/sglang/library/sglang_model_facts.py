#!/usr/bin/python
"""Ansible module: what a Hugging Face model directory holds, for the SGLang plan. Reads only."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
module: sglang_model_facts
short_description: Summarises a model directory (config.json, safetensors index and shards)
description:
  - Reads C(config.json) for the architecture and the MTP layer count (top level or C(text_config)).
  - Reads C(model.safetensors.index.json) for the declared tensor bytes, the shards and whether C(mtp.*)
    tensors exist; checks every listed shard exists and is not empty; sums the shard sizes.
  - Optionally compares SHA-256 checksums of named files.
  - Never changes the host.
options:
  path:
    description: The model directory.
    type: path
    required: true
  sha256:
    description: Expected SHA-256 by file name inside the directory; empty skips checksums.
    type: dict
    default: {}
author: sglang-fleet
"""

EXAMPLES = r"""
- name: Read the model directory
  sglang_model_facts:
    path: /srv/models/Qwen3.6-27B
  register: model
"""

RETURN = r"""
model:
  description: exists, config, architectures, mtp_layers, total_size, shard_bytes, shards,
    missing_shards, empty_shards, has_mtp_tensors, tensor_count, checksum_problems.
  returned: always
  type: dict
"""

INDEX = "model.safetensors.index.json"
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mtp_layers(config: Mapping[str, Any]) -> int:
    """MTP (next-token prediction) layers declared at the top level or in text_config."""
    for scope in (config, config.get("text_config") or {}):
        for key in MTP_LAYER_KEYS:
            value = scope.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def architectures(config: Mapping[str, Any]) -> list[str]:
    found = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or []
    return [str(name) for name in found]


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path: str, checksums: Mapping[str, str]) -> dict[str, Any]:
    facts: dict[str, Any] = {"path": path, "exists": os.path.isdir(path)}
    if not facts["exists"]:
        return facts
    config = _read_json(os.path.join(path, "config.json"))
    facts["config"] = config is not None
    facts["architectures"] = architectures(config or {})
    facts["mtp_layers"] = mtp_layers(config or {})
    index = _read_json(os.path.join(path, INDEX))
    if index is not None:
        weight_map = index.get("weight_map") or {}
        shards = sorted(set(weight_map.values()))
        facts["total_size"] = int((index.get("metadata") or {}).get("total_size") or 0)
        facts["tensor_count"] = len(weight_map)
        facts["has_mtp_tensors"] = any(name.startswith("mtp.") or ".mtp." in name for name in weight_map)
    else:
        shards = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
        facts["total_size"] = 0
        facts["has_mtp_tensors"] = False
    sizes = {name: os.path.getsize(os.path.join(path, name)) for name in shards if os.path.isfile(os.path.join(path, name))}
    facts["shards"] = len(shards)
    facts["shard_bytes"] = sum(sizes.values())
    facts["missing_shards"] = [name for name in shards if name not in sizes]
    facts["empty_shards"] = [name for name, size in sizes.items() if size == 0]
    problems = {}
    for name, expected in sorted(checksums.items()):
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path):
            problems[name] = "file to checksum is missing"
        elif sha256_of(file_path) != str(expected).lower():
            problems[name] = "SHA-256 differs from sglang_model_sha256"
    facts["checksum_problems"] = problems
    return facts


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "sha256": {"type": "dict", "default": {}}},
        supports_check_mode=True,
    )
    module.exit_json(changed=False, model=describe(module.params["path"], module.params["sha256"]))


if __name__ == "__main__":
    main()
