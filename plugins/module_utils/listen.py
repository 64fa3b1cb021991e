"""Where a server listens and how the fleet reaches it: one rule for the instances and the router."""

from __future__ import annotations

# Binds that only this host can reach; anything else needs an API key (preflight refuses it otherwise).
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def connect_host(listen_host: str) -> str:
    """The address the fleet's own clients (rollout, router, status) use for a server bound to `listen_host`."""
    return "127.0.0.1" if listen_host in ("0.0.0.0", "::", "") else listen_host


def is_loopback(listen_host: str) -> bool:
    return listen_host in LOOPBACK


def url_host(host: str) -> str:
    """`host` as a URL (or a Prometheus target) writes it: an IPv6 address in brackets (RFC 3986), any other as is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def http_url(host: str, port: int | str, tls: bool = False) -> str:
    """``http://<host>:<port>`` (``https://`` for a server that serves TLS, `tls`), an IPv6 address bracketed."""
    return f"{'https' if tls else 'http'}://{url_host(host)}:{port}"


def connect_url(listen_host: str, port: int | str, tls: bool = False) -> str:
    """The URL the fleet's own clients use for a server (or router) bound to `listen_host` on `port`."""
    return http_url(connect_host(listen_host), port, tls)


def remote_url(listen_host: str, advertise_host: str, port: int, tls: bool = False) -> str:
    """The URL other hosts (a fleet gateway) reach a server at: its own bind address when it names one, the host's
    advertised address when it binds every address, "" when it listens on loopback (no other host can reach it)."""
    if is_loopback(listen_host):
        return ""
    host = advertise_host if listen_host in ("0.0.0.0", "::", "") else listen_host
    return http_url(host, port, tls)
