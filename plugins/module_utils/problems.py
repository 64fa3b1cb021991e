"""The one shape of a preflight problem, wherever it is found (plan, CUDA, runtime, server, router)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def problem_line(host: str, where: str, variable: str, value: Any, cause: str, fix: str) -> str:
    """`<host> <where>: <variable>=<value as JSON>: <cause>; fix: <fix>`: what, where, why, and what to do."""
    shown = json.dumps(value, sort_keys=True, default=str)
    return f"{host} {where}: {variable}={shown}: {cause}; fix: {fix}"


@dataclass
class HostProblems:
    """The problem lines of one host, collected while its instances are derived and checked."""

    host: str
    lines: list[str] = field(default_factory=list)

    def add(self, where: str, variable: str, value: Any, cause: str, fix: str) -> None:
        self.lines.append(problem_line(self.host, where, variable, value, cause, fix))
