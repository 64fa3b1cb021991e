"""Readiness of SGLang services under systemd, for the sglang_rollout module.

Polls each service's readiness URL while watching its unit, and tells why a unit is no longer starting
the process it was starting (failed, stopped, restarted by systemd).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
from collections.abc import Callable
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import listeners, systemd

UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "InvocationID", "ExecMainCode", "ExecMainStatus", "Result")
# ExecMainCode: how the main process ended (siginfo's si_code); 2 and 3 mean a signal (ExecMainStatus) ended it.
KILLED_CODES = ("2", "3")


def unit_state(unit: str) -> dict[str, str]:
    """The unit's systemd properties that tell whether it still runs the process we started."""
    return systemd.show([unit], UNIT_PROPERTIES)[unit]


def ending(now: dict[str, str]) -> str:
    """How the unit's main process ended: "exited with status 1", "was killed by signal 9 (SIGKILL)"."""
    status = now.get("ExecMainStatus", "?")
    if now.get("ExecMainCode") in KILLED_CODES and status.isdigit():
        try:
            name = signal.Signals(int(status)).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {status} ({name})"
    return f"exited with status {status}"


def death(before: dict[str, str], now: dict[str, str]) -> str | None:
    """Why a unit is no longer starting the process it was starting, or None while it still is.

    SGLang ends itself with SIGKILL when it fails to start (kill_process_tree, itself included), so a
    signal is reported as one: "killed by signal 9 (SIGKILL)", not "exit status 9".
    """
    if now.get("ActiveState") in ("failed", "inactive", "deactivating"):
        return f"unit is {now.get('ActiveState')} ({now.get('Result', '?')}; its process {ending(now)})"
    if now.get("SubState") == "auto-restart":
        return f"process {ending(now)} and systemd is restarting it"
    if now.get("NRestarts") != before.get("NRestarts") or now.get("InvocationID") != before.get("InvocationID"):
        return f"systemd restarted the unit (restart count {before.get('NRestarts')} -> {now.get('NRestarts')})"
    return None


def http_status(url: str, timeout: float = 30.0, ca_data: str = "", ca_file: str = "") -> int | None:
    """HTTP status of a GET, or None when nothing answers yet (https verified against the CA `ca_data`, PEM text, or
    `ca_file`, its path, else the system's CAs)."""
    try:
        with listeners.open_url(url, (), timeout, ca_data=ca_data, ca_file=ca_file) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


def journal_tail(unit: str, lines: int, since: float | None = None, width: int = 400) -> str:
    """The unit's last journal lines (since a Unix time, when given), each cut to `width` characters."""
    command = ["journalctl", "--unit", unit, "--lines", str(lines), "--no-pager", "--output", "short-iso"]
    if since is not None:
        command += ["--since", f"@{int(since)}"]
    output = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    return "\n".join(line if len(line) <= width else line[: width - 3] + "..." for line in output.splitlines())


def wait(
    services: list[dict[str, str]],
    path: str,
    timeout: float,
    interval: float,
    state: Callable[[str], dict[str, str]] = unit_state,
    status: Callable[[str], int | None] = http_status,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Polls until every service is ready; returns {"ready": {unit: seconds}} or {"failed": unit, "reason": ...}."""
    start = clock()
    before = {service["unit"]: state(service["unit"]) for service in services}
    pending = {service["unit"]: service["url"].rstrip("/") + path for service in services}
    ready: dict[str, float] = {}
    last_status: dict[str, int | None] = {}
    while pending:
        for unit, url in list(pending.items()):
            reason = death(before[unit], state(unit))
            if reason:
                return {"ready": ready, "failed": unit, "reason": reason}
            last_status[unit] = status(url)
            if last_status[unit] == 200:
                ready[unit] = round(clock() - start, 1)
                del pending[unit]
        if not pending:
            break
        if clock() - start >= timeout:
            unit = sorted(pending)[0]
            answer = last_status.get(unit)
            shown = f"HTTP {answer}" if answer else "no answer"
            return {
                "ready": ready,
                "failed": unit,
                "reason": f"not ready after {timeout:.0f} s (last {shown} from {pending[unit]})",
            }
        sleep(interval)
    return {"ready": ready}


def http_json(
    url: str,
    payload: dict[str, Any] | None = None,
    timeout: float = 60.0,
    api_key: str = "",
    ca_file: str = "",
    ca_data: str = "",
) -> Any:
    """GET (or POST `payload` as JSON) and decode the JSON answer; raises on HTTP errors. With a key, `url` is an
    instance's: the key goes only to that instance's unit on this host (listeners.ListenerError for a port another
    process holds, or for another host's instance over plain HTTP: the rollout's canary peers on other hosts). An
    instance over https is verified against the CA (`ca_file`, its path, or `ca_data`, its PEM text; else the system's
    CAs): the instances' CA, sglang_server_tls_ca."""
    data = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    method = "POST" if data is not None else "GET"
    units = {listeners.instance_unit(url)} if api_key else ()
    with listeners.open_url(
        url, units, timeout, method=method, data=data, headers=headers, this_host_only=True, ca_file=ca_file, ca_data=ca_data,
        variable="sglang_server_tls_cert",
    ) as response:
        return json.loads(response.read().decode() or "null")
