"""An instance's start-up figures, from SGLang's own Prometheus metrics (issue 42).

SGLang 0.5.17 and 0.5.23 (observability/metrics_collector.py, `emit_startup_time`) set, once the server is up:

* ``sglang:startup_time_seconds{phase=...}``: ``load_weight``, ``kv_cache_allocation``, ``scheduler_e2e`` (the
  scheduler's start to ready) and ``tokenizer_e2e`` (the engine's launch to ready: the whole start-up);
* ``sglang:startup_cuda_graph_time_seconds{phase=...}``: one gauge per captured graph kind (``decode``, ``prefill``,
  ``target_verify``, ``draft_*``); 0 where nothing was captured (``--disable-cuda-graph``);
* ``sglang:weight_load_duration_seconds{source=...}``: the wall time of the latest ``update_weights_from_<source>``
  (``disk``, ``distributed``, ``tensor``, ``ipc``); absent until one ran.

Each carries the server's labels (``engine_type``, ``model_name``; with several ranks one sample per rank): the largest
sample of a phase is taken (the slowest rank decides when the server is ready).
"""

from __future__ import annotations

import re
from typing import Any

_SAMPLE = re.compile(r"^(?P<name>sglang:[a-z_]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
FAMILIES = ("sglang:startup_time_seconds", "sglang:startup_cuda_graph_time_seconds", "sglang:weight_load_duration_seconds")


def samples(text: str) -> dict[str, dict[str, float]]:
    """family -> phase (or source) -> the largest value, for the start-up families of a Prometheus exposition."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] not in FAMILIES:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        key = labels.get("phase") or labels.get("source") or ""
        try:
            value = float(match["value"])
        except ValueError:
            continue
        family = found.setdefault(match["name"], {})
        family[key] = max(value, family.get(key, value))
    return found


def startup(text: str) -> dict[str, Any]:
    """The start-up figures of one instance (seconds, rounded to 0.01; None where SGLang reported nothing):
    total, weight load, KV cache allocation, CUDA graph capture (the sum of its phases), the scheduler's own start, and
    the latest in-place weight update (`weight_update`, with its source)."""
    found = samples(text)
    phases = found.get("sglang:startup_time_seconds", {})
    graphs = found.get("sglang:startup_cuda_graph_time_seconds", {})
    updates = found.get("sglang:weight_load_duration_seconds", {})

    def seconds(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    return {
        "total": seconds(phases.get("tokenizer_e2e", phases.get("scheduler_e2e"))),
        "weight_load": seconds(phases.get("load_weight")),
        "kv_cache_allocation": seconds(phases.get("kv_cache_allocation")),
        "cuda_graph": seconds(sum(graphs.values())) if graphs else None,
        "scheduler": seconds(phases.get("scheduler_e2e")),
        "weight_update": seconds(max(updates.values())) if updates else None,
        "weight_update_source": max(updates, key=lambda source: updates[source]) if updates else None,
    }


def summary(figures: dict[str, Any]) -> str:
    """One line: 'start-up 26.32 s (weights 0.17 s, KV cache 1.72 s, CUDA graphs 0.00 s)'; '' when none reported."""
    if figures.get("total") is None:
        return ""
    parts = [
        f"{label} {figures[key]:.2f} s"
        for key, label in (("weight_load", "weights"), ("kv_cache_allocation", "KV cache"), ("cuda_graph", "CUDA graphs"))
        if figures.get(key) is not None
    ]
    return f"start-up {figures['total']:.2f} s" + (f" ({', '.join(parts)})" if parts else "")
