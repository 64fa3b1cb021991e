"""Bounded load through a host's router or the fleet gateway, run inside the test host (system python3, stdlib only).

python3 - <router url> <max seconds> <clients> [<keys file> [<model> [<CA file>]]] < load_client.py
With a model (a router in front of several models routes by it), the clients use the OpenAI completions route and
name it; without, SGLang's /generate. An https router (the fleet gateway over TLS) is verified with the CA file.
Clients send /generate requests until /tmp/stop-load exists or the time is up; a sampler counts the
router's healthy workers every 0.2 s. Prints one JSON line: requests, failed, first errors, fewest and most
workers in rotation, and when the first and the last failed request ended (`failed_from`, `failed_until`: the
host's clock, seconds since the epoch; null when none failed) and how many failed with each error (`error_counts`).

Several router URLs, comma-separated (the fleet gateways of a mesh, issue 39): a client that retries on the other
gateway. Each request goes to the gateway that last answered it and, when that one fails (refused, reset, no answer,
or an error status), at once to the next; it fails only when every gateway failed it. The report adds `retried` (the
requests another gateway answered) and `failed_by_router` (each URL's failed attempts); the sampler asks the gateways
in turn.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.request

ROUTERS, SECONDS, CLIENTS = sys.argv[1].split(","), float(sys.argv[2]), int(sys.argv[3])
# The router's keys (JSON: the clients' key for requests, the admin key for /workers), as its launcher reads them.
KEYS_FILE = sys.argv[4] if len(sys.argv) > 4 else "/etc/sglang-router/router.json"
MODEL = sys.argv[5] if len(sys.argv) > 5 else ""
CA_FILE = sys.argv[6] if len(sys.argv) > 6 else ""
TLS = ssl.create_default_context(cafile=CA_FILE) if any(url.startswith("https:") for url in ROUTERS) else None
STOP = os.environ.get("LOAD_CLIENT_STOP_FILE", "/tmp/stop-load")  # another file where /tmp is shared (the unit test)
deadline = time.monotonic() + SECONDS
counts = {"requests": 0, "failed": 0, "retried": 0}
failed_by_router = dict.fromkeys(ROUTERS, 0)
errors: list[str | None] = []
failed_at: list[float] = []  # when the first and the last failed request ended
error_counts: dict[str, int] = {}
in_rotation: list[int] = []
lock = threading.Lock()


def running() -> bool:
    return time.monotonic() < deadline and not os.path.exists(STOP)


def client(number: int) -> None:
    path, body = "/generate", json.dumps({"text": f"client {number}: hello", "sampling_params": {"max_new_tokens": 16}}).encode()
    if MODEL:
        path, body = (
            "/v1/completions",
            json.dumps({"model": MODEL, "prompt": f"client {number}: hello", "max_tokens": 16}).encode(),
        )
    headers = {"Content-Type": "application/json"}
    if router_key("api_key"):
        headers["Authorization"] = f"Bearer {router_key('api_key')}"
    first = number % len(ROUTERS)  # the clients start spread over the gateways
    while running():
        ok, error, tried = False, None, 0
        for tried in range(len(ROUTERS)):
            router = ROUTERS[(first + tried) % len(ROUTERS)]
            ok, error = attempt(router, path, body, headers)
            if ok:
                first = (first + tried) % len(ROUTERS)
                break
            with lock:
                failed_by_router[router] += 1
        with lock:
            counts["requests"] += 1
            counts["retried"] += 1 if ok and tried else 0
            if not ok:
                counts["failed"] += 1
                failed_at[1:] = [time.time()]  # the first one stays, the last one is replaced
                error_counts[str(error)] = error_counts.get(str(error), 0) + 1
                if len(errors) < 5:
                    errors.append(error)


def attempt(router: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[bool, str | None]:
    """One request to one router: whether it answered with tokens, else the error."""
    request = urllib.request.Request(f"{router}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=TLS) as response:
            answer = json.loads(response.read())
            tokens = (answer.get("usage") if MODEL else answer.get("meta_info") or {}).get("completion_tokens", 0)
            ok = response.status == 200 and tokens > 0
            return ok, None if ok else f"{router}: HTTP {response.status}"
    except Exception as failure:  # every failure counts
        return False, f"{router}: {type(failure).__name__}: {failure}"


def router_key(name: str) -> str:
    """One of the router's keys (api_key, admin_key), from the keys file it reads; runs as root on the host."""
    try:
        with open(KEYS_FILE, encoding="utf-8") as handle:
            return str(json.load(handle).get(name) or "")
    except OSError:
        return ""


def sampler() -> None:
    key = router_key("admin_key")
    turn = 0
    while running():
        request = urllib.request.Request(f"{ROUTERS[turn % len(ROUTERS)]}/workers")
        turn += 1
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=5, context=TLS) as response:
                workers = json.loads(response.read())["workers"]
            in_rotation.append(sum(1 for worker in workers if worker.get("is_healthy")))
        except Exception:
            pass
        time.sleep(0.2)


threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)] + [threading.Thread(target=sampler)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(
    json.dumps(
        {
            **counts,
            "errors": errors,
            "fewest_in_rotation": min(in_rotation or [0]),
            "most_in_rotation": max(in_rotation or [0]),
            "failed_from": failed_at[0] if failed_at else None,
            "failed_until": failed_at[-1] if failed_at else None,
            "error_counts": error_counts,
            **({"failed_by_router": failed_by_router} if len(ROUTERS) > 1 else {}),
        }
    )
)
