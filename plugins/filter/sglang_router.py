"""Ansible filters of the router role: its extra flags as argv words, and its preflight problems."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import render_flag
from ansible_collections.sglang.fleet.plugins.module_utils.listen import is_loopback
from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line


def sglang_router_flags(extra: dict[str, Any]) -> list[str]:
    """{flag: value} as argv words, by flag (module_utils/flags.py's rule: true is a bare switch, false and null leave
    it out, a list repeats values). The router's flags are taken as spelled (without --, _ kept) and each value as
    its text (str), as this filter always rendered them."""
    return [word for key, value in sorted(extra.items()) for word in render_flag("--" + str(key).removeprefix("--"), value, str)]


def sglang_router_problems(
    host: str,
    port: int,
    prometheus_port: int,
    instances: list[dict[str, Any]],
    listening: list[dict[str, Any]],
    bind: str = "127.0.0.1",
    has_api_key: bool = False,
) -> list[str]:
    """The router's ports must not be an instance's, nor taken by another program; beyond loopback it needs a key."""
    problems = []
    if not is_loopback(bind) and not has_api_key:
        problems.append(
            problem_line(
                host,
                "router",
                "sglang_router_host",
                bind,
                "a router reachable beyond this host needs an API key",
                "set sglang_api_key (from ansible-vault) or keep 127.0.0.1",
            )
        )
    taken = {instance["port"]: instance["name"] for instance in instances}
    taken.update({instance["nccl_port"]: f"{instance['name']}'s NCCL port" for instance in instances})
    owners = {entry["port"]: entry for entry in listening}
    for variable, value in (("sglang_router_port", port), ("sglang_router_prometheus_port", prometheus_port)):
        if value in taken:
            problems.append(
                problem_line(host, "router", variable, value, f"port {value} is {taken[value]}", "choose a free port")
            )
        owner = owners.get(value)
        if owner and owner.get("unit") != "sglang-router.service":
            problems.append(
                problem_line(
                    host,
                    "router",
                    variable,
                    value,
                    f"port {value} is taken by PID {owner.get('pid')} ({owner.get('name', '?')})",
                    "stop that program or choose another port",
                )
            )
    if port == prometheus_port:
        problems.append(
            problem_line(host, "router", "sglang_router_prometheus_port", port, "same as sglang_router_port", "use two ports")
        )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_router_flags": sglang_router_flags,
            "sglang_router_problems": sglang_router_problems,
        }
