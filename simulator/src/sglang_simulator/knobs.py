"""Rehearsal knobs: environment variables that steer the simulator.

They all start with ``SGLANG_SIM_`` so they can never be mistaken for, or
collide with, a real SGLang setting.  See simulator/README.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_GPUS_FILE = "/etc/sglang-simulator/gpus.json"
DEFAULT_STATE_DIR = "/run/sglang-simulator"

_TRUE = {"1", "true", "yes", "y", "on"}
_FALSE = {"0", "false", "no", "n", "off", ""}


class KnobError(ValueError):
    """A ``SGLANG_SIM_*`` variable has a value the simulator cannot use."""


def _float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r} is not a number") from None
    if math.isnan(value) or value < minimum:
        raise KnobError(f"{name}={raw!r} must be a number >= {minimum}")
    return value


def _optional_float(env: Mapping[str, str], name: str, minimum: float) -> float | None:
    if env.get(name, "").strip() == "":
        return None
    return _float(env, name, 0.0, minimum)


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise KnobError(f"{name}={env.get(name)!r} is not a boolean (use 1 or 0)")


@dataclass(frozen=True)
class Knobs:
    load_seconds: float = 2.0
    warmup_seconds: float = 1.0
    fail_at_start: str | None = None
    hang_loading: bool = False
    ignore_speculative: bool = False
    die_after_seconds: float | None = None
    accept_length: float | None = None
    token_seconds: float = 0.001
    health_seconds: float = 1.0
    stop_seconds: float = 6.0
    gpus_file: Path = Path(DEFAULT_GPUS_FILE)
    state_dir: Path = Path(DEFAULT_STATE_DIR)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Knobs:
        fail = env.get("SGLANG_SIM_FAIL_AT_START")
        return cls(
            load_seconds=_float(env, "SGLANG_SIM_LOAD_SECONDS", 2.0),
            warmup_seconds=_float(env, "SGLANG_SIM_WARMUP_SECONDS", 1.0),
            fail_at_start=fail if fail else None,
            hang_loading=_bool(env, "SGLANG_SIM_HANG_LOADING"),
            ignore_speculative=_bool(env, "SGLANG_SIM_IGNORE_SPECULATIVE"),
            die_after_seconds=_optional_float(env, "SGLANG_SIM_DIE_AFTER_SECONDS", 0.0),
            accept_length=_optional_float(env, "SGLANG_SIM_ACCEPT_LENGTH", 1.0),
            token_seconds=_float(env, "SGLANG_SIM_TOKEN_SECONDS", 0.001),
            health_seconds=_float(env, "SGLANG_SIM_HEALTH_SECONDS", 1.0),
            stop_seconds=_float(env, "SGLANG_SIM_STOP_SECONDS", 6.0),
            gpus_file=Path(env.get("SGLANG_SIM_GPUS_FILE") or DEFAULT_GPUS_FILE),
            state_dir=Path(env.get("SGLANG_SIM_STATE_DIR") or DEFAULT_STATE_DIR),
        )
