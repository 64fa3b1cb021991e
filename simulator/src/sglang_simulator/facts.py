"""The facts about the pinned SGLang release, loaded from the packaged JSON.

The JSON is written by ``simulator/tools/extract_sglang_facts.py`` from a real
SGLang install; nothing here is typed in by hand.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

SGLANG_VERSION = "0.5.23"


@dataclass(frozen=True)
class Flag:
    """One argparse action of the real ``sglang serve`` parser."""

    option_strings: tuple[str, ...]
    dest: str
    action: str
    nargs: int | str | None
    type: str | None
    choices: tuple[Any, ...] | None
    default: Any
    const: Any
    required: bool
    provided_by: str
    deprecated_use_instead: str | None = None


@dataclass(frozen=True)
class Facts:
    sglang_version: str
    source: str
    flags: tuple[Flag, ...]
    renamed_flags: dict[str, str]
    removed_flags: tuple[str, ...]
    removed_environment: tuple[str, ...]
    removed_environment_replacements: dict[str, str]
    deprecated_environment: dict[str, str]
    environment_names: frozenset[str]
    architectures: frozenset[str]
    speculative_algorithms: tuple[str, ...]
    speculative_algorithm_aliases: dict[str, str]
    cuda_graph_config_keys: dict[str, tuple[str, ...]]
    record_only_fields: dict[str, Any]
    non_field_dests: frozenset[str]

    def defaults(self) -> dict[str, Any]:
        """Every destination with the default the real parser gives it."""
        out: dict[str, Any] = {}
        for flag in self.flags:
            if flag.action != "help" and flag.dest not in out:
                out[flag.dest] = flag.default
        return out


def _flag(raw: dict[str, Any]) -> Flag:
    choices = raw.get("choices")
    return Flag(
        option_strings=tuple(raw["option_strings"]),
        dest=raw["dest"],
        action=raw["action"],
        nargs=raw.get("nargs"),
        type=raw.get("type"),
        choices=tuple(choices) if choices is not None else None,
        default=raw.get("default"),
        const=raw.get("const"),
        required=bool(raw.get("required")),
        provided_by=raw.get("provided_by", "sglang"),
        deprecated_use_instead=raw.get("deprecated_use_instead"),
    )


@functools.cache
def load_facts(version: str = SGLANG_VERSION) -> Facts:
    """Load ``data/sglang-<version>.json`` shipped inside the package."""
    text = (
        resources.files("sglang_simulator")
        .joinpath("data")
        .joinpath(f"sglang-{version}.json")
        .read_text(encoding="utf-8")
    )
    raw = json.loads(text)
    return Facts(
        sglang_version=raw["sglang_version"],
        source=raw["source"],
        flags=tuple(_flag(f) for f in raw["flags"]),
        renamed_flags=dict(raw["renamed_flags"]),
        removed_flags=tuple(raw.get("removed_flags", [])),
        removed_environment=tuple(raw["removed_environment"]),
        removed_environment_replacements=dict(raw.get("removed_environment_replacements", {})),
        deprecated_environment=dict(raw.get("deprecated_environment", {})),
        environment_names=frozenset(raw.get("environment_names", [])),
        architectures=frozenset(raw["architectures"]),
        speculative_algorithms=tuple(raw["speculative_algorithms"]),
        speculative_algorithm_aliases=dict(raw.get("speculative_algorithm_aliases", {})),
        cuda_graph_config_keys={
            phase: tuple(keys) for phase, keys in raw.get("cuda_graph_config_keys", {}).items()
        },
        record_only_fields=dict(raw.get("record_only_fields", {})),
        non_field_dests=frozenset(raw.get("non_field_dests", [])),
    )
