"""Ansible filter of playbooks/status.yml: one table of every instance, router and gateway of the hosts the run visited,
each with a URL the operator can use from the control node, or where it answers when it listens on loopback."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

ROW = "%-7s %-13s %-6s %-5s %-12s %-7s %-7s %-7s %-17s %-9s %-8s %-8s %-14s %s"
HEADER = tuple(
    ["HOST", "INSTANCE", "PORT", "GPUS", "MODEL", "SGLANG", "SPEC", "ACCEPT", "HEALTH", "UPTIME", "RESTARTS", "EXPOSURE",
     "STARTUP", "URL"]
)  # fmt: skip


def startup_cell(figures: Any) -> str:
    """SGLang's own start-up seconds of an instance: total/weight load/CUDA graphs ('-' where it reported none)."""
    figures = figures if isinstance(figures, Mapping) else {}
    cells = [figures.get(key) for key in ("total", "weight_load", "cuda_graph")]
    return "-" if cells[0] is None else "/".join("-" if c is None else f"{float(c):.1f}" for c in cells)


def reach(host: str, entry: Mapping[str, Any]) -> str:
    """The URL the operator uses: the one other hosts use where it listens beyond loopback, else its loopback URL, said
    to answer on its host only."""
    return str(entry.get("remote_url") or f"{entry['url']} (on {host} only)")


def uptime(seconds: int | None) -> str:
    return "-" if seconds is None else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[-1].split("/")[0]


def tunnel_hint(host: str, url: str, connection: str) -> str:
    """How to reach a loopback URL on `host` from the control node."""
    port = port_of(url)
    if connection.endswith("docker"):  # a sandbox host: a container without curl
        address = url.split("://", 1)[-1].rsplit(":", 1)[0]
        script = (
            f"import http.client as h; c = h.HTTPConnection('{address}', {port}); c.request('GET', '/v1/models'); "
            "print(c.getresponse().read().decode())"
        )
        return f'docker exec {host} python3 -c "{script}"'
    return f"ssh -N -L {port}:127.0.0.1:{port} {host}, then {url}/v1/models from here"


def sglang_status_table(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The status table: a row per instance, router and gateway, and, when any listens on loopback only, how to reach
    it from the control node."""
    lines = [ROW % HEADER]
    loopback: list[tuple[str, str]] = []
    for host in hosts:
        variables = hostvars[host]
        status = variables.get("_sglang_server_status")
        if not isinstance(status, Mapping):
            lines.append(f"{host}: no status (unreachable, or preflight of the plan failed)")
            continue
        for item in status.get("instances") or []:
            accept = item.get("accept_length")
            lines.append(ROW % (
                host, item["name"], item["port"], item["gpus"], str(item["model"])[:12], item.get("version") or "-",
                item.get("speculative_algorithm") or "-", "-" if accept is None else f"{float(accept):.2f}", item["health"],
                uptime(item.get("uptime_seconds")), item["restarts"],
                "-" if item.get("exposure") is None else item["exposure"], startup_cell(item.get("startup")), reach(host, item),
            ))  # fmt: skip
            if not item.get("remote_url"):
                loopback.append((host, str(item["url"])))
        routers = variables.get("sglang_router_status")
        for item in (routers.get("routers") or []) if isinstance(routers, Mapping) else []:
            lines.append(ROW % (
                host, item["name"], port_of(str(item["url"])), "-", "-", "-", "-", "-", item["health"],
                uptime(item.get("uptime_seconds")), item["restarts"],
                "-" if item.get("exposure") is None else item["exposure"], "-", reach(host, item),
            ))  # fmt: skip
            if not item.get("remote_url"):
                loopback.append((host, str(item["url"])))
    if loopback:
        host, url = loopback[-1]
        connection = str(hostvars[host].get("ansible_connection") or "ssh")
        hint = tunnel_hint(host, url, connection)
        lines.append(f"A URL marked (on HOST only) listens on that host's loopback: reach it there, e.g. {hint}.")
    return lines


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_status_table": sglang_status_table}
