"""Starts sglang-router with its keys read from a file, so that no command line or environment holds them.

    python -I sglang_router_launcher.py KEYS_FILE [ROUTER ARG ...]

KEYS_FILE (0600, the router's account's) is JSON: ``{"api_key": "<client key>", "admin_key": "<admin key>"}``, either
may be empty. The launcher adds ``--api-key=<client key>`` and
``--control-plane-api-keys=fleet:sglang-fleet:admin:<admin key>`` to ``sys.argv`` inside this process and runs
sglang-router's own entry point (``sglang_router.launch_router``) as ``__main__``: ``/proc/<pid>/cmdline`` shows only
the words systemd started it with, and the environment never holds a key (no ``EnvironmentFile=``).

sglang-router 0.3.2 then behaves as follows: the client key is required on the inference routes and sent to the
workers given with ``--worker-urls``; the admin key, and only it, unlocks the worker registry (``/workers``) and
gets 401 on the inference routes; the client key gets 401 on ``/workers``.

A fleet gateway, whose workers are registered through its worker registry (``/workers``) rather than on its command
line, also names a workers file in the environment (``SGLANG_FLEET_WORKERS_FILE``: JSON ``{"workers": [{"url": ...},
...]}``, the registry as the last deploy left it): the launcher adds ``--worker-urls`` with those URLs, so a gateway
that restarts (a crash, a reboot, a changed unit) routes to the fleet's workers again without waiting for a deploy.

Installed by the fleet (role sglang_router) and run with the venv's ``python -I``; standard library only.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

ENTRY_POINT = "sglang_router.launch_router"
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


def worker_args(path: str) -> list[str]:
    """``--worker-urls`` with the URLs the workers file lists; none when there is no file yet (a first start)."""
    try:
        with open(path, encoding="utf-8") as handle:
            workers = json.load(handle).get("workers") or []
    except FileNotFoundError:
        return []
    urls = [str(worker["url"]) for worker in workers if isinstance(worker, dict) and worker.get("url")]
    return ["--worker-urls", *urls] if urls else []


def main(argv: list[str] | None = None, entry_point: str = ENTRY_POINT) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python -I sglang_router_launcher.py KEYS_FILE [ROUTER ARG ...]")
    keys = read_keys(args[0])
    for flag in ("--api-key", "--control-plane-api-keys"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in args[1:]):
            raise SystemExit(f"{flag} belongs in {args[0]}, not on the command line")
    workers = worker_args(os.environ[WORKERS_FILE]) if os.environ.get(WORKERS_FILE) and "--worker-urls" not in args else []
    sys.argv = [entry_point, *args[1:], *workers, *key_args(keys)]
    runpy.run_module(entry_point, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
