"""Ansible filter for test hosts: the shard files a stand-in model directory needs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SAFETENSORS_HEADER_BYTES = 1 << 20


def testhost_shards(model: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each shard of the fixture's index, with a size that gives the index's total_size in all."""
    index = json.loads((Path(model["fixture"]) / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    size = math.ceil(int(index["metadata"]["total_size"]) / len(shards)) + SAFETENSORS_HEADER_BYTES
    return [{"path": f"{model['path']}/{name}", "size": size} for name in shards]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"testhost_shards": testhost_shards}
