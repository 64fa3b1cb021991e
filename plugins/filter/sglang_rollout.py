"""Ansible filters of the fleet's rollout plan (plugins/module_utils/rollout_plan.py): the waves a capacity budget
allows, each host's share of them, and the budgets preflight refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.rollout_plan import (
    alike_problems,
    budget_problems,
    canary_peers,
    describe_waves,
    host_waves,
    leaving_instances,
    rollout_waves,
)


def _fleet(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> dict[str, list[Any]]:
    return {host: list(hostvars[host].get("sglang_instances") or []) for host in hosts}


def sglang_rollout_waves(hosts: Sequence[str], hostvars: Mapping[str, Any], budget: Any, canary: bool = False) -> list[Any]:
    """The rollout's waves across `hosts`: each host's instances to restart (its fact sglang_server_to_roll), bounded
    per served model by `budget` against the model's instances on those hosts (their sglang_instances)."""
    to_roll = {host: list(hostvars[host].get("sglang_server_to_roll") or []) for host in hosts}
    return rollout_waves(to_roll, _fleet(hosts, hostvars), budget, canary)


def sglang_rollout_canary_peers(waves: Sequence[Any], hostvars: Mapping[str, Any], host: str) -> dict[str, list[str]]:
    """For each model, the URLs (as `host` reaches them) of its instances in the waves after the canaries'."""
    hosts = list(dict.fromkeys(member["host"] for wave in waves for member in wave))
    to_roll = {name: list(hostvars[name].get("sglang_server_to_roll") or []) for name in hosts}
    return canary_peers(waves, to_roll, host)


def sglang_rollout_budget_problems(
    host: str, hosts: Sequence[str], hostvars: Mapping[str, Any], budget: Any, allow_outage: bool = False, settings: str = ""
) -> list[str]:
    """Preflight's problems with the budget for `host` (its sglang_instances, counted against those of `hosts`); with
    `settings`, the name of the fact each host published its rollout settings in: any other host's that differ."""
    problems = budget_problems(
        host, list(hostvars[host].get("sglang_instances") or []), _fleet(hosts, hostvars), budget, allow_outage
    )
    if settings:
        published = {other: hostvars[other].get(settings) or {} for other in hosts if hostvars[other].get(settings)}
        problems += alike_problems(host, hostvars[host].get(settings) or {}, published)
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_rollout_waves": sglang_rollout_waves,
            "sglang_rollout_host_waves": host_waves,
            "sglang_rollout_wave_lines": describe_waves,
            "sglang_rollout_budget_problems": sglang_rollout_budget_problems,
            "sglang_rollout_canary_peers": sglang_rollout_canary_peers,
            "sglang_leaving_instances": leaving_instances,
        }
