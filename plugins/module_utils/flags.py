"""Settings as command-line words: one rule for SGLang's flags (the plan) and the router's (its extra args)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def flag_name(key: str) -> str:
    """A setting's flag as SGLang spells it: the key itself when it starts with --, else --key with _ written -."""
    return key if key.startswith("--") else "--" + key.replace("_", "-")


def format_value(value: Any) -> str:
    """One value as a word: a float exactly, a mapping or a list as JSON, anything else as its text."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def render_flag(flag: str, value: Any, word: Callable[[Any], str] = format_value) -> list[str]:
    """One setting as argv words: true is a bare flag, false and null leave it out, a list repeats values (each
    written by `word`)."""
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    if isinstance(value, list):
        return [flag, *(word(item) for item in value)]
    return [flag, word(value)]
