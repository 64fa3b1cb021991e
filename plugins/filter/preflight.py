"""Ansible filters of the fleet-wide preflight gate: every host's problems, from every role that checked it, and the
refusal each host reports of its own."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# A role's preflight leaves its problem lines in the fact <role>_preflight_problems; the planner's comes first.
PROBLEM_FACT = re.compile(r"^\w+_preflight_problems$")
# And its warnings (they refuse nothing) in <role>_preflight_warnings: a refused host says them after its problems.
WARNING_FACT = re.compile(r"^\w+_preflight_warnings$")
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


def sglang_preflight_refusal(host: str, hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """What the gate fails `host` with: its own problems under one line that counts them and names the other hosts
    with problems (each fails with its own), then its warnings; empty when `host` has no problem, so a host is never
    failed for another's."""
    own = sglang_preflight_report([host], hostvars)
    if not own:
        return []
    others = [other for other in hosts if other != host and sglang_preflight_report([other], hostvars)]
    elsewhere = f" (and on {', '.join(others)}, reported there)" if others else ""
    warnings = [
        f"WARNING: {warning}"
        for fact in sorted(name for name in hostvars[host] if WARNING_FACT.match(name))
        for warning in (hostvars[host].get(fact) or [])
    ]
    return [f"{host}: preflight found {len(own)} problem(s) on this host{elsewhere}; nothing was changed on any host:", *own,
            *warnings]  # fmt: skip


def sglang_preflight_unchecked(unchecked: Sequence[str]) -> list[str]:
    """The gate's one report when no checked host has a problem but some host did not complete preflight (it failed, or
    was unreachable, above): every host stops, none is failed for it."""
    if not unchecked:
        return []
    return [
        f"Preflight did not complete on {', '.join(unchecked)} (failed or unreachable above: see its error);"
        " nothing was changed on any host, and the deploy stops here for every host.",
        *(f"{host} host: preflight did not complete; fix: make the host reachable and its variables valid" for host in unchecked),
    ]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_preflight_report": sglang_preflight_report,
            "sglang_preflight_refusal": sglang_preflight_refusal,
            "sglang_preflight_unchecked": sglang_preflight_unchecked,
        }
