"""A change of a host's shape: the running instances whose GPUs the plan gives to others, and what keeps serving."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

FLEET_UNIT = re.compile(r"sglang-\d+\.service")


def fleet_gpus(facts: Mapping[str, Any]) -> dict[str, list[int]]:
    """The GPUs each of the fleet's running instance units holds now (its processes' memory, as nvidia-smi lists it)."""
    held: dict[str, set[int]] = {}
    for process in facts.get("gpu_processes") or []:
        unit = str(process.get("unit") or "")
        if FLEET_UNIT.fullmatch(unit) and isinstance(process.get("gpu_index"), int):
            held.setdefault(unit, set()).add(process["gpu_index"])
    return {unit: sorted(gpus) for unit, gpus in sorted(held.items())}


def reshape(instances: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of the host's shape stops first, and what keeps serving meanwhile.

    A running instance that holds a GPU the new plan gives to another instance is displaced: it stops (drained
    from the router first) before any instance restarts, and starts again in its new shape with the stopped
    instances. Running instances the plan no longer has stop anyway. `summary` states the capacity that remains.
    """
    held = fleet_gpus(facts)
    owner = {gpu: str(instance["unit"]) for instance in instances for gpu in instance["gpu_ids"]}
    planned = {str(instance["unit"]) for instance in instances}
    displaced = [unit for unit, gpus in held.items() if unit in planned and any(owner.get(gpu, unit) != unit for gpu in gpus)]
    removed = [unit for unit in held if unit not in planned]
    if not displaced:
        return {"displaced": [], "removed": removed, "summary": ""}
    serving = [unit for unit in held if unit in planned and unit not in displaced]
    takers = {unit: sorted({owner[gpu] for gpu in held[unit] if owner.get(gpu, unit) != unit}) for unit in displaced}
    summary = (
        f"reshape from {len(held)} running instance(s) to {len(instances)}: "
        + "; ".join(f"{unit} stops first (GPU(s) {held[unit]} go to {', '.join(takers[unit])})" for unit in displaced)
        + (f"; {', '.join(removed)} stop(s) as no longer planned" if removed else "")
        + f". Serving while they are down: {len(serving)} of {len(held)}"
        + (f" ({', '.join(serving)}, each until its own restart)" if serving else "")
        + "; the displaced start again in their new shape with the instances not yet running."
    )
    return {"displaced": displaced, "removed": removed, "summary": summary}
