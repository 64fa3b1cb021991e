"""Ansible filter of the fleet-wide preflight gate: every host's problems, from every role that checked it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# A role's preflight leaves its problem lines in the fact <role>_preflight_problems; the planner's comes first.
PROBLEM_FACT = re.compile(r"^\w+_preflight_problems$")
PLAN_FACT = "sglang_preflight_problems"


def problem_facts(names: Sequence[str]) -> list[str]:
    """The names that hold a role's preflight problems: the plan's first, then the others by name."""
    found = sorted(name for name in names if PROBLEM_FACT.match(name))
    return sorted(found, key=lambda name: name != PLAN_FACT)


def sglang_preflight_report(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """Every problem every host's preflight left in a <role>_preflight_problems fact, host by host."""
    return [
        problem
        for host in hosts
        for fact in problem_facts(list(hostvars[host].keys()))
        for problem in (hostvars[host].get(fact) or [])
    ]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_preflight_report": sglang_preflight_report}
