"""Starts the SGLang Model Gateway (smg) with its keys read from a file, so that no command line or environment holds
them.

    python -I sglang_router_launcher.py KEYS_FILE [ROUTER ARG ...]

KEYS_FILE (0600, the router's account's) is JSON: ``{"api_key": "<client key>", "admin_key": "<admin key>"}``, either
may be empty. The launcher adds ``--api-key=<client key>`` and
``--control-plane-api-keys=fleet:sglang-fleet:admin:<admin key>`` to ``sys.argv`` inside this process and runs
smg's own entry point (``smg.launch_router``, what ``smg launch`` runs) as ``__main__``: ``/proc/<pid>/cmdline`` shows only
the words systemd started it with, and the environment never holds a key (no ``EnvironmentFile=``).

smg 1.13.0 then behaves as follows (recorded: tests/recordings/smg-1.13.0): the client key is required on the
inference routes and sent to the workers; the admin key, and only it, unlocks the worker registry (``/workers``) and
gets 401 on the inference routes; the client key gets 401 on ``/workers``.

The fleet registers a router's (or gateway's) workers through its worker registry (``/workers``), not on its command
line, and names in the environment a workers file (``SGLANG_FLEET_WORKERS_FILE``: JSON ``{"workers": [{"url": ...,
"model_id": ...}, ...]}``, the registry as the last deploy left it) and the router's own URL
(``SGLANG_FLEET_ROUTER_URL``): a detached process of the launcher waits until the router answers there (``/liveness``)
and registers those workers through the registry, each with its model, so a router that restarts (a crash, a reboot, a
changed unit) routes to its workers again without waiting for a deploy. Not ``--worker-urls``: they carry no model,
and sglang-router 0.3.2 dropped them in its multi-model mode. Not smg's file discovery (``--discovery-provider
file``) either: the rollouts take a worker out through the registry (``DELETE /workers/{id}``, also from other hosts,
for a fleet gateway), and discovery registers a worker its manifest lists again at its next reread (recorded: 5.9 s
after the DELETE with a 3 s interval), while a worker added through the registry is left alone.

Installed by the fleet (role sglang_router) and run with the venv's ``python -I``; standard library only, and the
fleet's own key-holder check (module_utils/listeners.py), installed beside it as ``sglang_fleet_listeners.py``.
"""

from __future__ import annotations

import http.client
import importlib.util
import ipaddress
import json
import os
import runpy
import socket
import ssl
import sys
import time
import urllib.parse
import urllib.request
from types import ModuleType

ENTRY_POINT = "smg.launch_router"
ADMIN_KEY_PREFIX = "fleet:sglang-fleet:admin:"  # id:name:role:key


def read_keys(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as handle:
        keys = json.load(handle)
    if not isinstance(keys, dict) or not all(isinstance(value, str) for value in keys.values()):
        raise SystemExit(f"{path}: expected a JSON object of strings")
    return keys


def key_args(keys: dict[str, str]) -> list[str]:
    """The router flags that carry the keys."""
    args: list[str] = []
    if keys.get("api_key"):
        args.append("--api-key=" + keys["api_key"])  # one word: a key may start with "-"
    if keys.get("admin_key"):
        args.append("--control-plane-api-keys=" + ADMIN_KEY_PREFIX + keys["admin_key"])
    return args


WORKERS_FILE = "SGLANG_FLEET_WORKERS_FILE"
# The CA (PEM) that the router's https URL is verified with (a fleet gateway over TLS); unset: the system's CAs.
CA_FILE = "SGLANG_FLEET_CA_FILE"


def tls_context() -> ssl.SSLContext:
    """What an https router URL is verified with: the fleet's CA (CA_FILE) when set, else the system's CAs."""
    return ssl.create_default_context(cafile=os.environ.get(CA_FILE) or None)


# The router's URL as the fleet's own clients reach it (the role's rule for an address that listens everywhere).
ROUTER_URL = "SGLANG_FLEET_ROUTER_URL"


def read_workers(path: str) -> list[dict[str, str]]:
    """The workers file's workers (URL and model); none when there is no file yet (a first start)."""
    try:
        with open(path, encoding="utf-8") as handle:
            workers = json.load(handle).get("workers") or []
    except FileNotFoundError:
        return []
    return [
        {"url": str(worker["url"]), "model_id": str(worker.get("model_id") or "")}
        for worker in workers
        if isinstance(worker, dict) and worker.get("url")
    ]


class PortTaken(Exception):
    """The process at the other end of the connection to the router's URL is not this router: no key was sent."""


def post_worker(url: str, worker: dict[str, str], keys: dict[str, str], router_pid: int | None = None) -> int:
    """``POST /workers`` for one worker with the admin key (the client key when there is none); the HTTP status. With
    `router_pid`, nothing is sent unless the connection's other end is that router (PortTaken otherwise)."""
    payload = {"url": worker["url"]}
    if worker["model_id"]:
        payload["model_id"] = worker["model_id"]
    if keys.get("api_key"):
        payload["api_key"] = keys["api_key"]  # the key the router sends the worker: the clients'
    headers = {"Content-Type": "application/json"}
    admin_key = keys.get("admin_key") or keys.get("api_key")
    if admin_key:
        headers["Authorization"] = "Bearer " + admin_key
    parts = urllib.parse.urlsplit(url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":  # a gateway over TLS: verified before the key is sent
        connection = http.client.HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10, context=tls_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=10)
    try:
        connection.connect()
        if router_pid is not None and not held_by(connection.sock, parts.port or 80, router_pid):
            raise PortTaken(
                f"port {parts.port or 80} is held by a process other than this router (PID {router_pid}): "
                f"no key was sent to {url}"
            )
        connection.request("POST", "/workers", json.dumps(payload).encode(), headers)
        return int(connection.getresponse().status)
    finally:
        connection.close()


# The fleet's key-holder check (plugins/module_utils/listeners.py, what the modules check with), which the role installs
# beside this file: `python -I` puts neither this folder nor the environment on sys.path, so it is loaded by its path
# (root's folder, 0755, like this file).
LISTENERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_fleet_listeners.py")


def listeners() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_fleet_listeners", LISTENERS)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {LISTENERS}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def held_by(sock: socket.socket, port: int, router_pid: int, proc: str = "/proc") -> bool:
    """Whether the other end of the connected `sock` is the router (`router_pid`, the launcher's own process, where the
    router runs): the socket that accepted it is the router's, or, while it waits to be accepted, every socket listening
    on the port is."""
    check = listeners()
    server, client = check.endpoint(sock.getpeername()), check.endpoint(sock.getsockname())
    # The sockets first, then what the router holds: a socket it accepts in between is then in both (the other order
    # misses it and refuses the router's own connection).
    accepted = check.connection_inode(server, client, proc)
    listening = {inode for found, inode in check.listening_sockets(check.tcp_tables(proc)) if found == port}
    held = set(check.socket_owners(proc, [str(router_pid)]))
    if accepted:
        return accepted in held
    return bool(listening) and listening <= held


def key_may_cross_in_clear(worker_url: str) -> bool:
    """Whether a client key sent to `worker_url` may cross the network in the clear (plain http to another host, not
    loopback): a router with a client key would send that key, and its clients' prompts, to the worker (preflight
    refuses such a worker for a keyed gateway; a workers file a failed switch to https left behind may still list one).
    Fails closed: only https, or http to a loopback address, is kept; a URL without a scheme, of another scheme, or
    whose address part has credentials, a backslash or whitespace (parsers disagree on its host) is held back."""
    parts = urllib.parse.urlsplit(worker_url.strip())
    if any(mark in parts.netloc for mark in ("@", "\\")) or any(space.isspace() for space in parts.netloc) or not parts.netloc:
        return True
    if parts.scheme == "https":
        return False
    if parts.scheme != "http":
        return True
    host = parts.hostname or ""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def register(
    url: str, workers: list[dict[str, str]], keys: dict[str, str], timeout: float = 300.0, router_pid: int | None = None
) -> list[str]:
    """Waits until the router answers, then registers each worker - only over a connection the router (`router_pid`)
    accepted, and with a client key never one on another host over plain http; returns those it did not register
    (202)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            context = tls_context() if url.startswith("https:") else None
            with urllib.request.urlopen(url + "/liveness", timeout=5, context=context) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            return [worker["url"] for worker in workers]
        time.sleep(0.5)
    refused = []
    for worker in workers:
        if keys.get("api_key") and key_may_cross_in_clear(worker["url"]):
            refused.append(
                f"{worker['url']} (not https, nor http to this host: the client key would cross the network in the clear)"
            )
            continue
        try:
            status = post_worker(url, worker, keys, router_pid)
        except PortTaken as error:
            print(f"sglang-fleet: {error}", file=sys.stderr, flush=True)
            return [worker["url"] for worker in workers]
        except OSError:
            status = 0
        if status != 202:
            refused.append(f"{worker['url']} (HTTP {status})" if status else worker["url"])
    return refused


def register_in_background(url: str, keys: dict[str, str], path: str) -> None:
    """Forks twice: the grandchild registers the workers file's workers once the router answers and exits (systemd
    reaps it); this process waits only for the child, then runs the router."""
    workers = read_workers(path)
    if not workers:
        return
    router_pid = os.getpid()  # the router runs in this process (runpy, below)
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        if os.fork() == 0:
            refused = register(url, workers, keys, router_pid=router_pid)
            note = f"; not registered: {', '.join(refused)}" if refused else ""
            print(
                f"sglang-fleet: registered {len(workers) - len(refused)} of {len(workers)} worker(s) from {path}{note}",
                file=sys.stderr,
                flush=True,
            )
    except Exception as error:  # the router runs on; its journal says why the registration stopped
        print(f"sglang-fleet: registering the workers of {path} failed: {error!r}", file=sys.stderr, flush=True)
    finally:
        os._exit(0)


def main(argv: list[str] | None = None, entry_point: str = ENTRY_POINT) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python -I sglang_router_launcher.py KEYS_FILE [ROUTER ARG ...]")
    keys = read_keys(args[0])
    for flag in ("--api-key", "--control-plane-api-keys"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in args[1:]):
            raise SystemExit(f"{flag} belongs in {args[0]}, not on the command line")
    if os.environ.get(WORKERS_FILE):
        if not os.environ.get(ROUTER_URL):
            raise SystemExit(f"{WORKERS_FILE} needs {ROUTER_URL}: the URL to register its workers at")
        register_in_background(os.environ[ROUTER_URL], keys, os.environ[WORKERS_FILE])
    sys.argv = [entry_point, *args[1:], *key_args(keys)]
    runpy.run_module(entry_point, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
