"""The facts about the pinned SGLang release, loaded from the packaged JSON.

The JSON is written by ``scripts/extract_sglang_facts.py`` from a real
SGLang install; nothing here is typed in by hand.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

# The newest release with a table in data/: what the simulator stands in for by default.
SGLANG_VERSION = "0.5.23"
# Selects another release whose table is in data/ (sglang-fleet sets it to the host's sglang_version).
VERSION_ENV = "SGLANG_SIM_VERSION"


def available_releases() -> list[str]:
    """Every release with a ``data/sglang-<version>.json`` table, oldest first."""
    names = [entry.name for entry in resources.files("sglang_simulator").joinpath("data").iterdir()]
    versions = [
        n[len("sglang-") : -len(".json")] for n in names if n.startswith("sglang-") and n.endswith(".json")
    ]
    return sorted(versions, key=lambda v: tuple(int(p) if p.isdigit() else -1 for p in v.split(".")))


def release(env: Mapping[str, str] | None = None) -> str:
    """The SGLang release the simulator stands in for: ``$SGLANG_SIM_VERSION``, default the newest table.

    The one place the release is chosen; everything that loads facts asks here.
    """
    chosen = (os.environ if env is None else env).get(VERSION_ENV, "").strip() or SGLANG_VERSION
    if chosen not in available_releases():
        raise ValueError(
            f"{VERSION_ENV}={chosen}: the simulator has no table of SGLang {chosen} "
            f"(it knows {', '.join(available_releases())})"
        )
    return chosen


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
    # configs/model_config.py multimodal_model_archs, less those multimodal only with --enable-multimodal
    # (the table's multimodal_architectures_opt_in, which the simulator treats as text models).
    multimodal_architectures: frozenset[str] = frozenset()

    def multimodal(self, architectures: tuple[str, ...]) -> bool:
        """Whether SGLang builds the model's processor at start and warms it up with a chat completion."""
        return any(name in self.multimodal_architectures for name in architectures)

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


def load_facts(version: str | None = None) -> Facts:
    """Load ``data/sglang-<version>.json`` shipped inside the package (default: :func:`release`)."""
    return _load_facts(version or release())


@functools.cache
def _load_facts(version: str) -> Facts:
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
        multimodal_architectures=frozenset(raw.get("multimodal_architectures", [])),
    )
