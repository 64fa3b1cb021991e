"""Ansible filters for test hosts: the shard files a stand-in model directory needs, and the hosts that lack a stand-in
machine."""

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


GPU_KEYS = ("count", "name", "memory_mib")


def testhost_machine_problems(hosts: list[str], machines: Mapping[str, Any]) -> list[str]:
    """One line per host whose stand-in machine (`sandbox_machine`: {gpus: {count, name, memory_mib}}) is missing or
    incomplete, naming what is missing and where to set it; `machines` maps each host to its `sandbox_machine`."""
    problems = []
    for host in hosts:
        machine = machines.get(host) or {}
        gpus = machine.get("gpus") if isinstance(machine, Mapping) else None
        missing = [key for key in GPU_KEYS if not isinstance(gpus, Mapping) or key not in gpus]
        if missing:
            problems.append(
                f"{host} host: sandbox_machine.gpus lacks {', '.join(missing)}; fix: set sandbox_machine: {{gpus: "
                f"{{count: 2, name: NVIDIA H100 80GB HBM3, memory_mib: 81559}}}} in the host's own inventory file (README, "
                f'"A test host of your own"), or an entry {host} in sandbox_machines (inventory/sandbox/group_vars/all.yml)'
            )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"testhost_shards": testhost_shards, "testhost_machine_problems": testhost_machine_problems}
