"""Ansible filters for what a deploy's tasks decide from the results this run registered so far (module_utils
role_decisions.py): one filter call in a role's vars or task, not a chain of templates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import changed_items, routers_first, server_rolling


def truncated(text: str, length: int = 300, leeway: int = 5, end: str = "...") -> str:
    """`text` cut at a word before `length` characters (with `end`), as Jinja's `truncate(length)` cuts it."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def sglang_rollout_halted(hosts: Sequence[str], hostvars: Mapping[str, Any], result: str) -> str:
    """Why a wave of a fleet rollout halts: each of `hosts` whose registered `result` (a fact named so: its wave's roll)
    failed, with its message (at most 300 characters); empty when none failed."""
    lines = []
    for host in hosts:
        rolled = hostvars[host].get(result) or {}
        if isinstance(rolled, Mapping) and rolled.get("failed"):
            lines.append(f"{host} failed: {truncated(str(rolled.get('msg', '')))} ")
    return "".join(lines)


def sglang_router_bounced(restarted: Any, started: Any, first: Any = None) -> list[str]:
    """The units of the router processes this run restarted or started (the loops' registered results: `first`, the
    restart of those that verify the instances with a CA this run gives them, before the instances roll)."""
    return list(dict.fromkeys(item["unit"] for item in changed_items(first, restarted, started)))


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_server_rolling": server_rolling,
            "sglang_router_bounced": sglang_router_bounced,
            "sglang_routers_first": routers_first,
            "sglang_rollout_halted": sglang_rollout_halted,
        }
