"""The fleet gateways' layout (issue 39): the one place that decides whether a host runs a fleet gateway, whether the
gateways form a mesh, who a gateway's mesh peers are, and by which of a host's URLs each gateway knows its workers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def gateway_layout(host: str, gateways: Sequence[str], hostvars: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fleet gateways as `host` sees them (`gateways`: sglang_gateway_hosts, inventory hosts). Returns `gateways`
    (each named once, in order), `gateway` (whether `host` runs one), `mesh` (whether the gateways form a mesh: more than
    one gateway host, smg's --enable-mesh), `in_mesh` (`host` runs a gateway of that mesh), `peers` (the other gateways'
    mesh addresses, host:port, as each published it in its sglang_gateway fact, read through `hostvars`: none without),
    and `worker_url` (by gateway: "url" where the gateway is `host`'s own and alone, else "remote_url": a mesh hands each
    worker's URL as it is to the other gateways, where a loopback URL would name another host)."""
    names = list(dict.fromkeys(str(gateway) for gateway in gateways or []))
    mesh = len(names) > 1
    found = hostvars or {}
    peers = {
        str((found[gateway].get("sglang_gateway") or {}).get("mesh") or "")
        for gateway in names
        if gateway != host and gateway in found
    }
    return {
        "gateways": names,
        "gateway": host in names,
        "mesh": mesh,
        "in_mesh": mesh and host in names,
        "peers": sorted(peers - {""}),
        "worker_url": {gateway: "url" if gateway == host and not mesh else "remote_url" for gateway in names},
    }
