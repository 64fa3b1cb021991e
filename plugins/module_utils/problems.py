"""The one shape of a preflight problem, wherever it is found (plan, CUDA, runtime, server, router)."""

from __future__ import annotations

import json
from typing import Any


def problem_line(host: str, where: str, variable: str, value: Any, cause: str, fix: str) -> str:
    """`<host> <where>: <variable>=<value as JSON>: <cause>; fix: <fix>`: what, where, why, and what to do."""
    shown = json.dumps(value, sort_keys=True, default=str)
    return f"{host} {where}: {variable}={shown}: {cause}; fix: {fix}"
