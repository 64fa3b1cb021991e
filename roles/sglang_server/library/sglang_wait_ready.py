#!/usr/bin/python
"""Ansible module: wait until SGLang services answer /health_generate, or fail fast when one dies."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

DOCUMENTATION = r"""
module: sglang_wait_ready
short_description: Waits for SGLang services to be ready, failing fast when one dies while starting
description:
  - Polls each service's readiness URL (SGLang answers C(/health_generate) with 200 only after its
    weights are loaded and warm-up generated a token; before that it refuses connections or answers 503).
  - Watches each systemd unit at the same time. When a unit fails, stops, or is restarted by systemd
    while starting, the module fails at once with the last lines of that unit's journal instead of
    waiting out the timeout.
options:
  services:
    description: List of C({unit, url}) to wait for, all at once.
    type: list
    elements: dict
    required: true
  path:
    description: Readiness path appended to each url.
    type: str
    default: /health_generate
  timeout:
    description: Seconds to wait for all services (loading a large model takes minutes).
    type: int
    default: 900
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  journal_lines:
    description: Journal lines to include when a service fails.
    type: int
    default: 40
author: sglang-fleet
"""

EXAMPLES = r"""
- name: Wait for the instance
  sglang_wait_ready:
    services:
      - unit: sglang-30000.service
        url: http://127.0.0.1:30000
"""

RETURN = r"""
ready:
  description: Seconds each unit took to become ready, by unit.
  returned: always
  type: dict
"""

UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "InvocationID", "ExecMainStatus", "Result")


def unit_state(unit: str) -> dict[str, str]:
    """The unit's systemd properties that tell whether it still runs the process we started."""
    output = subprocess.run(
        ["systemctl", "show", unit, *(f"--property={name}" for name in UNIT_PROPERTIES)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def death(before: dict[str, str], now: dict[str, str]) -> str | None:
    """Why a unit is no longer starting the process it was starting, or None while it still is."""
    if now.get("ActiveState") in ("failed", "inactive", "deactivating"):
        return f"unit is {now.get('ActiveState')} ({now.get('Result', '?')}, exit status {now.get('ExecMainStatus', '?')})"
    if now.get("SubState") == "auto-restart":
        return f"process exited with status {now.get('ExecMainStatus', '?')} and systemd is restarting it"
    if now.get("NRestarts") != before.get("NRestarts") or now.get("InvocationID") != before.get("InvocationID"):
        return f"systemd restarted the unit (restart count {before.get('NRestarts')} -> {now.get('NRestarts')})"
    return None


def http_status(url: str, timeout: float = 30.0) -> int | None:
    """HTTP status of a GET, or None when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


def journal_tail(unit: str, lines: int) -> str:
    return subprocess.run(
        ["journalctl", "--unit", unit, "--lines", str(lines), "--no-pager", "--output", "short-iso"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


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


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "services": {"type": "list", "elements": "dict", "required": True},
            "path": {"type": "str", "default": "/health_generate"},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 2.0},
            "journal_lines": {"type": "int", "default": 40},
        },
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=False, ready={}, skipped=True, msg="not waiting in check mode")
    params = module.params
    result = wait(params["services"], params["path"], params["timeout"], params["interval"])
    if "failed" in result:
        unit = result["failed"]
        tail = journal_tail(unit, params["journal_lines"])
        module.fail_json(
            msg=f"{unit}: {result['reason']}. Last journal lines:\n{tail}",
            unit=unit,
            reason=result["reason"],
            journal=tail.splitlines(),
            ready=result["ready"],
        )
    module.exit_json(changed=False, ready=result["ready"], msg=json.dumps(result["ready"]))


if __name__ == "__main__":
    main()
