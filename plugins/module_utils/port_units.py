"""The host's listening TCP ports, each with the process and the systemd unit that holds it, read from /proc (module
sglang_host_facts)."""

from __future__ import annotations

import os
import re
from typing import Any

TCP_LISTEN = "0A"


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The systemd service a process runs in, from its cgroup path (v1 or v2)."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        for part in reversed(line.rsplit(":", 1)[-1].split("/")):
            if part.endswith(".service"):
                return part
    return None


def process_name(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def parse_listening(tables: list[str]) -> dict[int, int]:
    """Socket inode by listening TCP port, from /proc/net/tcp and tcp6 texts."""
    inodes: dict[int, int] = {}
    for text in tables:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                port = int(fields[1].rsplit(":", 1)[1], 16)
                inodes.setdefault(port, int(fields[9]))
    return inodes


def socket_owners(proc: str = "/proc") -> dict[int, int]:
    """PID by socket inode, from every process's open file descriptors."""
    owners: dict[int, int] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = f"{proc}/{entry}/fd"
        try:
            descriptors = os.listdir(fd_dir)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(f"{fd_dir}/{descriptor}")
            except OSError:
                continue
            match = re.fullmatch(r"socket:\[(\d+)\]", target)
            if match:
                owners.setdefault(int(match.group(1)), int(entry))
    return owners


def listening_ports(proc: str = "/proc") -> list[dict[str, Any]]:
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", encoding="utf-8") as handle:
                tables.append(handle.read())
        except OSError:
            continue
    owners = socket_owners(proc)
    result = []
    for port, inode in sorted(parse_listening(tables).items()):
        pid = owners.get(inode)
        result.append(
            {
                "port": port,
                "pid": pid,
                "name": process_name(pid, proc) if pid else "?",
                "unit": unit_of(pid, proc) if pid else None,
            }
        )
    return result
