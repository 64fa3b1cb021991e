"""On a node of an instance across hosts: the interface its traffic to another node leaves on (module sglang_host_facts
reports it as the host's `routes`; multinode.py's routed_interface reads them). Standard library only, and apart from
multinode.py so that the host facts module carries no planning code to every host."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

Run = Callable[[list[str]], tuple[int, str, str]]


def route_to(address: str, run: Run) -> dict[str, str]:
    """On the host: the interface its traffic to `address` leaves on ({ip, interface}, or {error}), from `ip route get`;
    for an address of the host itself (rank 0's own), the interface that holds it (`ip addr show to`)."""
    try:
        ip = str(socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except OSError as error:
        return {"error": f"{address} does not resolve here: {error}"}
    rc, out, err = run(["ip", "-o", "route", "get", ip])
    if rc != 0:
        return {"ip": ip, "error": f"ip route get {ip}: {(err or out).strip()}"}
    if out.startswith("local "):
        rc, out, err = run(["ip", "-o", "addr", "show", "to", ip])
        held = re.match(r"\d+:\s+([^\s:@]+)", out)
        if rc != 0 or not held:
            return {"ip": ip, "error": f"ip addr show to {ip}: {(err or out).strip() or 'no interface holds it'}"}
        return {"ip": ip, "interface": held.group(1)}
    dev = re.search(r"\bdev\s+(\S+)", out)
    return {"ip": ip, "interface": dev.group(1)} if dev else {"ip": ip, "error": f"ip route get {ip}: {out.strip()}"}
