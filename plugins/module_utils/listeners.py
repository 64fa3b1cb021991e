"""Who listens on a TCP port of this host: port -> socket inode -> PID -> systemd unit (from /proc).

The host facts report every listening port's holder (preflight: a port taken by another program); the fleet's senders
of a key (the API key, a router's admin key) open their connection with `open_url` here: a key goes to a local port only
when the process that accepted the connection (or, while it waits in the queue, every socket listening there) belongs
to the unit it is meant for. A port is free while its router restarts and while SGLang
loads its model (it binds its HTTP port after loading): any local account could bind it first and collect the key.

Standard library only (modules on Python >= 3.8); the router's launcher (role sglang_router) runs this file too, installed
beside it, for the same check of its own router. Reading other processes' descriptors needs root (the modules run
as root); a process whose descriptors cannot be read holds no socket as far as this says, so it is never the
expected holder either.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Collection, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

TCP_LISTEN = "0A"


class ListenerError(Exception):
    """A key was about to go to a port held by a process other than the expected unit's: nothing was sent."""


class PlainHttpRefused(ListenerError):
    """A key was about to go to another host over plain HTTP (open_url's `this_host_only`): nothing was sent."""


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The system service a process runs in, from its cgroup path (v1 or v2): the path's last part, a `.service` right
    under `system.slice`. A process in any user's tree (`user.slice`, `user@UID.service`) runs in no system service,
    whatever its cgroups are named: an unprivileged user may create `…/user@1000.service/…/sglang-30000.service`
    (`systemd-run --user --unit=sglang-30000`) but never a cgroup outside the tree delegated to them."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.rsplit(":", 1)[-1].split("/")
        if any(part == "user.slice" or part.startswith("user@") for part in parts):
            return None
        if len(parts) >= 2 and parts[-1].endswith(".service") and parts[-2] == "system.slice":
            return parts[-1]
    return None


def process_name(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def listening_sockets(tables: Iterable[str]) -> list[tuple[int, int]]:
    """(port, socket inode) of every listening TCP socket, from /proc/net/tcp and tcp6 texts (a port may have more
    than one: an address each, or SO_REUSEPORT)."""
    sockets = []
    for text in tables:
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN:
                sockets.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[9])))
    return sockets


def parse_listening(tables: list[str]) -> dict[int, int]:
    """Socket inode by listening TCP port (the first socket of each port)."""
    inodes: dict[int, int] = {}
    for port, inode in listening_sockets(tables):
        inodes.setdefault(port, inode)
    return inodes


def socket_owners(proc: str = "/proc", pids: Iterable[str] | None = None) -> dict[int, int]:
    """PID by socket inode, from the open file descriptors of every process (or of `pids`)."""
    owners: dict[int, int] = {}
    for entry in os.listdir(proc) if pids is None else pids:
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


def tcp_tables(proc: str = "/proc") -> list[str]:
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{name}", encoding="utf-8") as handle:
                tables.append(handle.read())
        except OSError:
            continue
    return tables


def holder(pid: int | None, proc: str = "/proc") -> dict[str, Any]:
    return {"pid": pid, "name": process_name(pid, proc) if pid else "?", "unit": unit_of(pid, proc) if pid else None}


def listening_ports(proc: str = "/proc") -> list[dict[str, Any]]:
    """Every listening port with the process (PID, name, unit) that holds its first socket."""
    owners = socket_owners(proc)
    first = sorted(parse_listening(tcp_tables(proc)).items())
    return [{"port": port, **holder(owners.get(inode), proc)} for port, inode in first]


def port_holders(port: int, proc: str = "/proc") -> list[dict[str, Any]]:
    """The holder of every socket listening on `port` (none when nothing listens)."""
    inodes = [inode for found, inode in listening_sockets(tcp_tables(proc)) if found == port]
    if not inodes:
        return []
    owners = socket_owners(proc)
    return [holder(owners.get(inode), proc) for inode in inodes]


def is_local(host: str) -> bool:
    """Whether `host` (a URL's host) is this host: a loopback name or address, or an address this host can bind."""
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:  # a name: local when one of its addresses is (the request resolves it the same way)
            found = socket.getaddrinfo(host, None)
            addresses = [ipaddress.ip_address(str(info[4][0]).split("%", maxsplit=1)[0]) for info in found]
        except (OSError, ValueError):
            return False
    return any(_bindable(address) for address in addresses)


def _bindable(address: ipaddress.IPv4Address | ipaddress.IPv6Address, proc: str = "/proc") -> bool:
    """Whether `address` is this host's: loopback, unspecified, or one it can bind a socket to. An IPv6 link-local
    address binds only with its interface's scope id, which a URL may not carry: it is this host's when one of its
    interfaces has it (/proc/net/if_inet6)."""
    if address.is_loopback or address.is_unspecified:
        return True
    if address.version == 6 and address.is_link_local:
        try:
            with open(f"{proc}/net/if_inet6", encoding="ascii") as table:
                return any(line.split()[0] == address.exploded.replace(":", "") for line in table if line.strip())
        except OSError:
            return True  # cannot tell: checked as this host's, so a key never goes unchecked
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def describe(found: dict[str, Any]) -> str:
    if not found["pid"]:
        return "a process this check cannot see"
    unit = f", unit {found['unit']}" if found["unit"] else ", in no service unit"
    return f"PID {found['pid']} ({found['name']}{unit})"


def refuse_strangers(port: int, url: str, holders: list[dict[str, Any]], units: Collection[str]) -> None:
    """Raises ListenerError when one of `holders` (of a socket on `port`) is not a process of one of `units`."""
    strangers = [found for found in holders if found["unit"] not in units]
    if strangers:
        raise ListenerError(
            f"port {port} is held by {', '.join(describe(found) for found in strangers)}, not by {' or '.join(sorted(units))}: "
            f"no key was sent to {url}"
        )


def _address(text: str) -> tuple[str, int]:
    """A /proc/net/tcp{,6} address ("0100007F:7530") as (IP, port), an IPv4-mapped IPv6 address as its IPv4."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1])), int(port, 16)
    address = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return str(address.ipv4_mapped or address), int(port, 16)


def endpoint(name: Any) -> tuple[str, int]:
    address = ipaddress.ip_address(str(name[0]).split("%", maxsplit=1)[0])
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(mapped or address), int(name[1])


def connection_inode(server: tuple[str, int], client: tuple[str, int], proc: str = "/proc") -> int | None:
    """The inode of the server's side of the TCP connection `client` -> `server` (0 while it waits to be accepted);
    None when there is no such connection."""
    for text in tcp_tables(proc):
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and _address(fields[1]) == server and _address(fields[2]) == client:
                return int(fields[9])
    return None


def verify_connection(sock: socket.socket, url: str, units: Collection[str], proc: str = "/proc") -> None:
    """Raises ListenerError unless the process at the other end of the connected `sock`, when it is on this host,
    belongs to one of `units`: the process that accepted it, or, while it waits in the queue of a listening socket,
    every process listening on that port. Checked on the connection itself, before anything is sent on it: a process
    that binds the port before or after the check gets nothing."""
    server, client = endpoint(sock.getpeername()), endpoint(sock.getsockname())
    if not is_local(server[0]):
        return  # another host's (what protects a key across the network is TLS)
    inode = connection_inode(server, client, proc)
    accepted = [holder(socket_owners(proc).get(inode), proc)] if inode else []
    refuse_strangers(server[1], url, accepted or port_holders(server[1], proc) or [holder(None, proc)], units)


def open_url(
    url: str,
    units: Collection[str],
    timeout: float,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    this_host_only: bool = False,
    ca_file: str = "",
    variable: str = "",
    ca_data: str = "",
) -> Any:
    """One HTTP request; its answer as `ansible.module_utils.urls.open_url` gives it (a response to read and close;
    urllib.error.HTTPError for a status >= 400). With `units` (a request that carries a key), on a connection to this
    host nothing is sent until the process at the other end is one of `units` (verify_connection; ListenerError
    otherwise); such a request goes straight to `url` (no proxy, no redirect followed). With `this_host_only`, such a
    request over plain HTTP to another host sends nothing either (ListenerError, naming `variable`, the setting that
    gives that server TLS): a key leaves its host only over TLS. An https URL is verified against `ca_file` (a PEM CA
    bundle: the fleet's own CA) or `ca_data` (its PEM text) when given, else against the system's CAs. No `units`:
    Ansible's open_url (a request without a secret), verified the same way."""
    # Imported here: deploy's probe imports this module on every host (http.client and Ansible's urls cost ~25 ms).
    import http.client
    import urllib.error

    if not units and not ca_data:
        from ansible.module_utils.urls import open_url as ansible_open_url

        extra = {"ca_path": ca_file} if ca_file else {}
        return ansible_open_url(url, data=data, headers=dict(headers or {}), method=method, timeout=timeout, **extra)

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        import ssl

        connection = http.client.HTTPSConnection(
            parts.hostname,
            parts.port,
            timeout=timeout,
            context=ssl.create_default_context(cafile=ca_file or None, cadata=ca_data or None),
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.connect()
        if this_host_only and parts.scheme == "http" and not is_local(endpoint(connection.sock.getpeername())[0]):
            fix = f": give that server TLS ({variable}) and use its https URL" if variable else ""
            raise PlainHttpRefused(
                f"{url} is another host's, over plain HTTP: no key was sent (a key leaves its host only over TLS){fix}"
            )
        if units:
            verify_connection(connection.sock, url, units)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # Connection: close, as urllib sends it: the socket closes with the response.
        connection.request(method, target, body=data, headers={**(headers or {}), "Connection": "close"})
        response = connection.getresponse()
    except BaseException:
        connection.close()
        raise
    if response.status >= 400:
        raise urllib.error.HTTPError(url, response.status, response.reason, response.headers, response)
    return response


def instance_unit(url: str) -> str:
    """The unit of the instance serving `url` (its port names it: sglang-<port>.service, module_utils/instances)."""
    parts = urlsplit(url)
    return f"sglang-{parts.port or (443 if parts.scheme == 'https' else 80)}.service"


# The router's and the fleet gateway's units (role sglang_router).
ROUTER_UNITS = frozenset({"sglang-router.service", "sglang-gateway.service"})
