"""Client for the worker-management API of the SGLang Model Gateway (smg 1.13.0; sglang-router 0.3.2 before it).

Stdlib only (urllib, json), for Ansible modules on Python >= 3.8 (builtin generics and ``X | None`` appear in
annotations only, which ``from __future__ import annotations`` leaves unevaluated). What the gateway does, as recorded
on smg 1.13.0 (tests/recordings/smg-1.13.0; the same API as sglang-router 0.3.2 but for the drain on removal):

* ``GET /workers`` -> 200 ``{"workers": [{"id": "<uuid>", "url": ..., "is_healthy": true, "status": "ready",
  "model_id": ..., "load": ..., "worker_type": "regular", "connection_mode": "http", "labels": {...}, ...}], "total": n,
  "stats": {...}}``.
  Only registered workers are listed; an addition still in progress is not.
* ``POST /workers`` ``{"url": ...}`` (optional ``"api_key"``: the key the worker expects) -> 202
  ``{"status": "accepted", "worker_id": ..., "location": "/workers/<id>", ...}``. The addition runs in the background:
  the router polls the worker's ``/health`` (for up to 0.9 x ``--worker-startup-timeout-secs``) and lists the worker,
  already healthy, once that answers 200 (~1 s after the POST for a running SGLang, whose /health takes ~1 s; a
  worker that refused the first connection is tried again only 30 s later: recorded 29.0 s). Posting a URL that is
  already registered answers 202 and changes nothing. Posting a URL whose addition is still in progress (a router's
  launcher registering its workers file at start, say) answers 409 ``{"error": "Worker creation already in progress
  for URL '<url>' with ID <uuid>. Poll GET /workers/<uuid>.", "code": "WORKER_CREATE_IN_PROGRESS"}``: this client
  waits for that addition instead.
* ``DELETE /workers/<uuid>`` -> 202; the worker is listed at once as ``"status": "draining"`` (``is_healthy`` false:
  no new requests) and unlisted 5 s later (the gateway's drain settle; recorded 5.04 s). There is no removal by URL
  (400). A DELETE for an addition still in progress answers 202 but does nothing: that addition still registers the
  worker once it answers.
* URLs are stored as given: ``http://h:1/`` and ``http://h:1`` would be two workers. This client sends and matches
  URLs without a trailing slash.
* A router started with ``--api-key`` (or ``--control-plane-api-keys``) wants ``Authorization: Bearer <key>`` on
  ``/workers`` (401/403 otherwise).
* A gateway started with ``--tls-cert-path``/``--tls-key-path`` serves https on its port (recorded:
  tests/recordings/smg-1.13.0-tls): this client verifies it against `ca_file` (the fleet's CA). A key never goes to
  another host over plain http: such a request is refused before anything is sent (listeners.ListenerError).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.sglang.fleet.plugins.module_utils import listeners, safe_write

ADDITION_IN_PROGRESS = "WORKER_CREATE_IN_PROGRESS"  # smg's code for a POST /workers of a URL being added
# The settings that make a gateway serve https (role sglang_router), named when a key would go to one over plain http.
TLS_VARIABLE = "sglang_gateway_tls_cert and sglang_gateway_tls_key on the gateway's host"


class RouterError(Exception):
    """The router did not answer, or answered something unexpected. ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WaitTimeout(RouterError):
    """The router accepted a change but did not show its effect before the deadline."""


def normalize_url(url: str) -> str:
    """The worker URL as this client sends and matches it: with its scheme, without a trailing slash."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"worker URL must start with http:// or https://: {url!r}")
    return url


def request(
    router_url: str,
    method: str,
    path: str,
    payload: dict[str, Any] | None = None,
    api_key: str = "",
    timeout: float = 10.0,
    ca_file: str = "",
) -> tuple[int, Any]:
    """Sends one request; returns (HTTP status, decoded JSON or text). Raises RouterError when nothing answers."""
    # Imported here: deploy's probe imports this module on every host, and asks a router only where the host has one
    # (Ansible's urls brings http.client, ssl and email: ~25 ms of the probe's call).
    import urllib.error

    data = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json"}  # the router answers 415 to a POST without it
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        # The key goes only to the router itself: listeners.ListenerError for a process other than it at that port.
        url = router_url.rstrip("/") + path
        # Another host's gateway only over TLS, verified against the fleet's CA (`ca_file`).
        with listeners.open_url(
            url, listeners.ROUTER_UNITS, timeout, method=method, data=data, headers=headers, this_host_only=True,
            ca_file=ca_file, variable=TLS_VARIABLE,
        ) as response:  # fmt: skip
            status, body = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        status, body = int(error.code), error.read()
    except (urllib.error.URLError, OSError) as error:
        raise RouterError(f"{method} {router_url}{path}: no answer ({error})") from error
    text = body.decode(errors="replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def _expect(status: int, body: Any, expected: int, what: str) -> Any:
    if status != expected:
        raise RouterError(f"{what}: HTTP {status}: {str(body)[:300] if body else '(empty answer)'}", status)
    return body


def list_workers(router_url: str, api_key: str = "", timeout: float = 10.0, ca_file: str = "") -> list[dict[str, Any]]:
    """The router's registered workers (entries of GET /workers)."""
    answer = request(router_url, "GET", "/workers", api_key=api_key, timeout=timeout, ca_file=ca_file)
    body = _expect(*answer, 200, "GET /workers")
    if not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        raise RouterError(f"GET /workers: unexpected answer {str(body)[:300]}")
    return list(body["workers"])


def find_worker(
    router_url: str, worker_url: str, api_key: str = "", timeout: float = 10.0, ca_file: str = ""
) -> dict[str, Any] | None:
    """The router's entry for `worker_url` (matched without trailing slash), or None."""
    wanted = normalize_url(worker_url)
    for worker in list_workers(router_url, api_key, timeout, ca_file):
        if str(worker.get("url", "")).rstrip("/") == wanted:
            return worker
    return None


def healthy_worker_urls(router_url: str, api_key: str = "", timeout: float = 10.0) -> list[str]:
    """Sorted URLs of the workers the router lists as healthy.

    Healthy is not the same as routed to: after failed requests the router's circuit breaker stops using a worker it
    still lists as healthy (until --cb-timeout-duration-secs, default 60 s, passes).
    """
    return sorted(str(w["url"]) for w in list_workers(router_url, api_key, timeout) if w.get("is_healthy") is True)


def _wait(
    condition: Callable[[], bool], deadline: float, interval: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> bool:
    while True:
        if condition():
            return True
        if clock() >= deadline:
            return False
        sleep(min(interval, max(0.0, deadline - clock())))


def remove_worker(
    router_url: str,
    worker_url: str,
    timeout: float = 30.0,
    api_key: str = "",
    interval: float = 0.2,
    http_timeout: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    ca_file: str = "",
) -> bool:
    """Unregisters `worker_url` and waits until the router no longer lists it. False when it was not listed.

    Requests already sent to the worker keep running there: drain it before stopping it. An addition of the URL that
    is still in progress is not cancelled by this.
    """
    deadline = clock() + timeout
    worker = find_worker(router_url, worker_url, api_key, http_timeout, ca_file)
    if worker is None:
        return False
    status, body = request(
        router_url, "DELETE", f"/workers/{worker['id']}", api_key=api_key, timeout=http_timeout, ca_file=ca_file
    )
    if status != 404:  # 404: removed meanwhile
        _expect(status, body, 202, f"DELETE /workers/{worker['id']} ({worker_url})")

    def gone() -> bool:
        return find_worker(router_url, worker_url, api_key, http_timeout, ca_file) is None

    if not _wait(gone, deadline, interval, clock, sleep):
        raise WaitTimeout(f"router {router_url} still lists {worker_url} {timeout:.0f} s after DELETE")
    return True


def add_worker(
    router_url: str,
    worker_url: str,
    timeout: float = 60.0,
    api_key: str = "",
    worker_api_key: str = "",
    replace: bool = False,
    model_id: str = "",
    interval: float = 0.5,
    http_timeout: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    ca_file: str = "",
) -> bool:
    """Registers `worker_url` and waits until the router lists it as healthy. False when it already was.

    A worker listed as unhealthy (or any listed worker, with `replace`) is removed and registered again: a fresh
    registration is routed to at once, whereas the router's own health checks and circuit breaker take minutes by
    default to take a recovered worker back. On WaitTimeout the router keeps trying to add the worker in the
    background (until --worker-startup-timeout-secs) and registers it if it comes up.
    """
    url = normalize_url(worker_url)
    deadline = clock() + timeout
    worker = find_worker(router_url, url, api_key, http_timeout, ca_file)
    if worker is not None:
        if worker.get("is_healthy") is True and not replace:
            return False
        remove_worker(router_url, url, max(0.0, deadline - clock()), api_key, interval, http_timeout, clock, sleep, ca_file)
    payload: dict[str, Any] = {"url": url}
    if worker_api_key:
        payload["api_key"] = worker_api_key
    if model_id:
        # The model the worker serves, as clients name it: what the router's multi-model mode routes by.
        payload["model_id"] = model_id
    status, body = request(router_url, "POST", "/workers", payload, api_key, http_timeout, ca_file)
    if status == 409 and isinstance(body, dict) and body.get("code") == ADDITION_IN_PROGRESS:
        # Someone else's addition of this URL (the router's launcher, at start) is under way: wait for it.
        in_progress = re.search(r"with ID ([0-9a-fA-F-]{36})", str(body.get("error", "")))
        worker_id = in_progress.group(1) if in_progress else ""
    else:
        body = _expect(status, body, 202, f"POST /workers ({url})")
        worker_id = str(body.get("worker_id", "")) if isinstance(body, dict) else ""

    def healthy() -> bool:
        listed = find_worker(router_url, url, api_key, http_timeout, ca_file)
        return listed is not None and listed.get("is_healthy") is True

    if not _wait(healthy, deadline, interval, clock, sleep):
        raise WaitTimeout(
            f"router {router_url} does not list {url} as healthy {timeout:.0f} s after POST /workers"
            f" ({_job_status(router_url, worker_id, api_key, http_timeout, ca_file)})"
        )
    return True


def _job_status(router_url: str, worker_id: str, api_key: str, timeout: float, ca_file: str = "") -> str:
    """The router's background job state for a worker id, for error messages (GET /workers/<id> -> job_status)."""
    if not worker_id:
        return "no worker id in the router's answer"
    try:
        status, body = request(router_url, "GET", f"/workers/{worker_id}", api_key=api_key, timeout=timeout, ca_file=ca_file)
    except RouterError as error:
        return str(error)
    job = body.get("job_status") if isinstance(body, dict) else None
    if status != 200 or not isinstance(job, dict):
        return f"GET /workers/{worker_id}: HTTP {status}"
    return f"job {job.get('job_type')} {job.get('status')}" + (f": {job['message']}" if job.get("message") else "")


def plan_changes(
    listed: Sequence[dict[str, Any]],
    planned: Sequence[str],
    ready: Callable[[str], str | None],
    keep_hosts: Sequence[str] = (),
    models: Mapping[str, str] | None = None,
) -> dict[str, list[Any]]:
    """What to do: {"add": planned URLs to register, "remove": unplanned URLs (but those of `keep_hosts`),
    "skipped": [{url, reason}]}; `ready(url)` says why a planned worker the router lacks cannot be added (None: it can)."""
    wanted = [normalize_url(url) for url in planned]
    by_url = {str(worker.get("url", "")).rstrip("/"): worker for worker in listed}
    add, skipped = [], []
    for url in dict.fromkeys(wanted):
        worker = by_url.get(url)
        model = (models or {}).get(url)
        if worker is not None and worker.get("is_healthy") is True and (not model or worker.get("model_id") == model):
            continue
        why = ready(url)
        if why is None:
            add.append(url)
        else:
            state = "not listed" if worker is None else "listed as unhealthy"
            skipped.append({"url": url, "reason": f"{state} by the router, and not ready itself ({why})"})
    remove = sorted(url for url in by_url if url not in wanted and urlsplit(url).hostname not in keep_hosts)
    return {"add": add, "remove": remove, "skipped": skipped}


def workers_file_content(listed: Sequence[Mapping[str, Any]]) -> str:
    """The workers file a router's launcher registers at start (the router's listed workers, by URL, with their model)."""
    workers = sorted(
        ({"url": str(worker.get("url", "")), "model_id": str(worker.get("model_id") or "")} for worker in listed),
        key=lambda worker: worker["url"],
    )
    return json.dumps({"workers": workers}, indent=1) + "\n"


def read_text(path: str) -> str | None:
    """A file's text, or None when it does not exist; a link there is refused (safe_write.LinkRefused), never read."""
    data = safe_write.read_file(path)
    return None if data is None else data.decode("utf-8")


def members_in_sync(
    router_url: str,
    planned: Sequence[str],
    api_key: str = "",
    keep_hosts: Sequence[str] = (),
    models: Mapping[str, str] | None = None,
    workers_file: str | None = None,
    ca_file: str = "",
) -> str | None:
    """None when the router lists every planned worker healthy (with its model), no other (but those of `keep_hosts`),
    and `workers_file` holds those workers; else what differs (sglang_router_members would change it), or why it could
    not tell (never taken as in sync)."""
    try:
        listed = list_workers(router_url, api_key=api_key, ca_file=ca_file)
    except (RouterError, OSError, ValueError, listeners.ListenerError) as error:
        return f"cannot list its workers: {error}"
    wanted = {normalize_url(url): str(model) for url, model in (models or {}).items()}
    changes = plan_changes(listed, planned, lambda url: None, keep_hosts, wanted)
    if changes["add"] or changes["remove"]:
        return f"to register {changes['add']}, to remove {changes['remove']}"
    try:
        if workers_file and read_text(workers_file) != workers_file_content(listed):
            return f"{workers_file} differs from its workers"
    except (OSError, ValueError) as error:
        return f"cannot read {workers_file}: {error}"
    return None


def routers_differences(routers: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """For each router ({url, workers, keep_hosts, models, workers_file, api_key, ca_file}), by URL, what sglang_router_members
    would change (empty when nothing)."""
    return {
        str(router["url"]): members_in_sync(
            str(router["url"]),
            list(router.get("workers") or []),
            api_key=str(router.get("api_key") or ""),
            keep_hosts=list(router.get("keep_hosts") or []),
            models=dict(router.get("models") or {}),
            workers_file=router.get("workers_file") or None,
            ca_file=str(router.get("ca_file") or ""),
        )
        or ""
        for router in routers
    }
