#!/usr/bin/python
"""Ansible module: what each SGLang instance on the host is doing, in fields safe to print."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_status
short_description: Reports each SGLang instance's and router's health, settings, uptime, restarts and unit sandboxing
description:
  - For each instance reads its unit from systemd (state, uptime, restart count), asks C(/health_generate),
    reads C(/server_info) (SGLang version, speculative algorithm, average accept length) and scores the unit
    with C(systemd-analyze security).
  - For each router process (the host's router, the fleet gateway) reads its unit likewise and asks C(/readiness)
    (200 once it routes to a healthy worker).
  - Returns only those fields. C(/server_info) also echoes the API key; it is never returned.
  - Changes nothing.
options:
  instances:
    description: The planned instances.
    type: list
    elements: dict
    required: true
  routers:
    description: >-
      The host's router processes, each C({name, unit, url, remote_url, ca_data}) (C(remote_url) empty on loopback;
      C(ca_data) the CA, PEM text, an C(https://) URL is verified with, else the system's CAs).
    type: list
    elements: dict
    default: []
  api_key:
    description: The servers' API key.
    type: str
    default: ""
  ca_data:
    description:
      - The CA (PEM text) that instances over TLS (C(https://) URLs, C(sglang_server_tls_cert)) are verified with
        (C(sglang_server_tls_ca), read on the control node); empty - the system's CAs.
    type: str
    default: ""
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Read the instances' status
  sglang.fleet.sglang_status:
    instances: "{{ sglang_instances }}"
"""

RETURN = r"""
instances:
  description: One entry per instance (name, port, url, remote_url, gpus, model, version, speculative_algorithm,
    accept_length, health, active_state, uptime_seconds, restarts, exposure, startup - SGLang's start-up figures from
    its metrics - total, weight_load, kv_cache_allocation, cuda_graph, scheduler, weight_update, in seconds).
  returned: always
  type: list
routers:
  description: One entry per router process (name, url, remote_url, health, active_state, uptime_seconds, restarts,
    exposure).
  returned: always
  type: list
"""

import re
import subprocess
import time
import urllib.error
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import listeners, startup_metrics, systemd
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_readiness import http_json, http_status

PROPERTIES = ("ActiveState", "NRestarts", "ActiveEnterTimestamp")


def unit_properties(unit: str) -> dict[str, str]:
    return systemd.show([unit], PROPERTIES, ["--timestamp=unix"])[unit]


def exposure(unit: str) -> float | None:
    """The overall exposure systemd-analyze security gives the unit (0 safest, 10 unsafe)."""
    output = subprocess.run(
        ["systemd-analyze", "security", "--no-pager", unit], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", output)
    return float(match.group(1)) if match else None


def health(url: str, ca_data: str = "") -> str:
    code = http_status(f"{url}/health_generate", timeout=30.0, ca_data=ca_data)
    return "ready" if code == 200 else ("starting" if code == 503 else f"down ({code or 'no answer'})")


def unit_state(unit_name: str, now: float) -> dict[str, Any]:
    """A unit's state, uptime, restarts and exposure score."""
    unit = unit_properties(unit_name)
    started = unit.get("ActiveEnterTimestamp", "").lstrip("@")
    return {
        "active_state": unit.get("ActiveState", "?"),
        "restarts": int(unit.get("NRestarts") or 0),
        "uptime_seconds": int(now - float(started)) if unit.get("ActiveState") == "active" and started.isdigit() else None,
        "exposure": exposure(unit_name),
    }


def describe(instance: dict[str, Any], api_key: str, now: float, ca_data: str = "") -> dict[str, Any]:
    state = {
        "name": instance["name"],
        "port": instance["port"],
        "url": instance["url"],
        "remote_url": instance.get("remote_url") or "",
        "gpus": ",".join(str(gpu) for gpu in instance["gpu_ids"]),
        "model": instance["served_model_name"],
        **unit_state(instance["unit"], now),
        "health": health(instance["url"], ca_data),
        "version": None,
        "speculative_algorithm": None,
        "accept_length": None,
        "startup": startup(instance["url"], ca_data),
    }
    if not instance.get("serves_http", True):
        # A node of rank other than 0 of an instance across hosts answers /health alone (rank 0 serves the instance).
        return state
    try:
        info = http_json(f"{instance['url']}/server_info", api_key=api_key, timeout=30.0, ca_data=ca_data)
    except Exception:
        return state
    internal = (info.get("internal_states") or [{}])[0]
    state.update(
        version=info.get("version"),
        speculative_algorithm=info.get("speculative_algorithm"),
        accept_length=internal.get("avg_spec_accept_length"),
    )
    return state


def startup(url: str, ca_data: str = "") -> dict[str, Any]:
    """SGLang's start-up figures of the running server (module_utils/startup_metrics.py), from /metrics, which needs
    no key; {} without --enable-metrics or when it does not answer."""
    try:
        with listeners.open_url(f"{url.rstrip('/')}/metrics", (), 10, ca_data=ca_data) as response:
            return startup_metrics.startup(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return {}


def router_health(url: str, ca_data: str = "") -> str:
    code = http_status(f"{url}/readiness", timeout=10.0, ca_data=ca_data)
    return "ready" if code == 200 else ("no healthy worker" if code == 503 else f"down ({code or 'no answer'})")


def describe_router(router: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "name": router["name"],
        "url": router["url"],
        "remote_url": router.get("remote_url") or "",
        **unit_state(router["unit"], now),
        "health": router_health(router["url"], str(router.get("ca_data") or "")),
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "instances": {"type": "list", "elements": "dict", "required": True},
            "routers": {"type": "list", "elements": "dict", "default": []},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "ca_data": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    now = time.time()
    module.exit_json(
        changed=False,
        instances=[
            describe(instance, module.params["api_key"], now, module.params["ca_data"]) for instance in module.params["instances"]
        ],
        routers=[describe_router(router, now) for router in module.params["routers"]],
    )


if __name__ == "__main__":
    main()
