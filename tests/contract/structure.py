"""Compare the STRUCTURE of two answers (real SGLang's recorded one, the simulator's), never their values.

Rules (what the contract test holds the simulator to):

* JSON: every key of the recorded answer must exist in the simulator's, recursively; types must agree,
  with int and float one "number" type. A recorded ``null`` carries no type, so anything matches it. A
  recorded value answered with ``null`` is a difference, unless its path is listed as state-dependent
  (``nullable``: e.g. ``cached_tokens_details`` is null until tokens come from the prefix cache). Lists
  compare the merged structure of their elements (a list of objects: the union of the keys). Keys only the
  simulator has are allowed (a newer release may add fields; clients ignore unknown ones).
* Prometheus text: every recorded family must exist with the same type, and every label-name set a
  recorded sample has must appear on a simulator sample of the same name.
* Server-sent events: both streams end with ``data: [DONE]``; the first and the last JSON events compare
  position by position, and every recorded event must match some simulator event.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from typing import Any


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _merge(items: list[Any]) -> Any:
    """One element standing for a list's elements: objects merged key by key (first non-null value)."""
    if items and all(isinstance(item, dict) for item in items):
        merged: dict[str, Any] = {}
        for item in items:
            for key, value in item.items():
                if merged.get(key) is None:
                    merged[key] = value
        return merged
    return next((item for item in items if item is not None), None)


# What the hardware run writes in place of a secret SGLang echoed (api_key in /server_info): the key, or null
# when the replay runs without one, both match it.
REDACTED = "<redacted>"


def _nullable(path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def compare_json(recorded: Any, simulated: Any, path: str = "$", nullable: Iterable[str] = ()) -> list[str]:
    """Differences in structure, one line each; empty when the simulator's answer holds the recorded shape."""
    nullable = tuple(nullable)
    real, sim = kind(recorded), kind(simulated)
    if real == "null" or recorded == REDACTED:
        return []
    if sim == "null":
        return [] if _nullable(path, nullable) else [f"{path}: real SGLang answers a {real}, the simulator null"]
    if real != sim:
        return [f"{path}: real SGLang answers a {real}, the simulator a {sim}"]
    diffs: list[str] = []
    if real == "object":
        for key, value in recorded.items():
            if key not in simulated:
                diffs.append(f"{path}.{key}: missing from the simulator's answer")
            else:
                diffs += compare_json(value, simulated[key], f"{path}.{key}", nullable)
    elif real == "list" and recorded:
        element = _merge(recorded)
        if not simulated:
            if kind(element) in ("object", "list"):
                diffs.append(f"{path}: real SGLang lists {kind(element)}s, the simulator an empty list")
        else:
            diffs += compare_json(element, _merge(simulated), f"{path}[]", nullable)
    return diffs


# -- Prometheus ---------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+\S+")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"')


class Metrics:
    """Families (``# TYPE``) and, per sample name, the label-name sets seen."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.labels: dict[str, set[tuple[str, ...]]] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, metric_type = line.split(None, 3)
                self.types[name] = metric_type.strip()
                continue
            match = _SAMPLE.match(line)
            if match and not line.startswith("#"):
                names = tuple(sorted(_LABEL.findall(match.group(3) or "")))
                self.labels.setdefault(match.group(1), set()).add(names)


def compare_metrics(recorded_text: str, simulated_text: str, prefix: str = "sglang:") -> list[str]:
    real, sim = Metrics(recorded_text), Metrics(simulated_text)
    diffs: list[str] = []
    for name, metric_type in sorted(real.types.items()):
        if not name.startswith(prefix):
            continue
        if name not in sim.types:
            diffs.append(f"{name}: {metric_type} missing from the simulator's /metrics")
        elif sim.types[name] != metric_type:
            diffs.append(f"{name}: real SGLang exports a {metric_type}, the simulator a {sim.types[name]}")
    for sample, label_sets in sorted(real.labels.items()):
        family = max((f for f in real.types if sample.startswith(f)), key=len, default=sample)
        if not sample.startswith(prefix) or family not in sim.types:
            continue  # a missing family is reported once, above
        for names in sorted(label_sets):
            if names not in sim.labels.get(sample, set()):
                diffs.append(f"{sample}: no simulator sample with the labels {list(names)}")
    return diffs


# -- server-sent events -------------------------------------------------------------------------------


def sse_events(lines: Iterable[str]) -> list[Any]:
    """The ``data:`` payloads of a stream, JSON decoded (``[DONE]`` kept as the string)."""
    out: list[Any] = []
    for line in lines:
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def compare_sse(recorded: list[Any], simulated: list[Any], nullable: Iterable[str] = ()) -> list[str]:
    nullable = tuple(nullable)
    if not simulated or simulated[-1] != "[DONE]":
        return ["stream: the simulator's stream does not end with data: [DONE]"]
    real = [event for event in recorded if event != "[DONE]"]
    sim = [event for event in simulated if event != "[DONE]"]
    if not sim:
        return ["stream: the simulator sent no JSON event"]
    diffs: list[str] = []
    if real:
        diffs += compare_json(real[0], sim[0], "$[first]", nullable)
        diffs += compare_json(real[-1], sim[-1], "$[last]", nullable)
    for index, event in enumerate(real):
        candidates = [compare_json(event, other, f"$[{index}]", nullable) for other in sim]
        best = min(candidates, key=len)
        if best:
            diffs += [f"no simulator event has the shape of recorded event {index}: {d}" for d in best]
    return list(dict.fromkeys(diffs))
