#!/usr/bin/python
"""Ansible module: the CUDA smoke check of SGLang instances, each inside the sandbox its unit will have."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_cuda_check
short_description: Runs the runtime's CUDA smoke check for each instance under its unit's own sandbox
description:
  - For each instance, runs the check command (C(--expect N), and C(--all-reduce) with more than one GPU) as a
    transient service (C(systemd-run --wait --pipe)) with the unit's account, device policy and sandboxing
    (C(properties)) and the instance's environment (written to a 0600 file read by systemd, so no value is on a
    command line). All instances run at once.
  - Returns one problem line per instance whose check failed, naming host, instance and the cause. Changes nothing.
  - A check that could not run is a failure, a missing script too (the runtime is installed with its check).
options:
  host:
    description: The inventory host, for the problem lines.
    type: str
    required: true
  instances:
    description: The instances to check, each C({name, gpu_ids, environment}).
    type: list
    elements: dict
    required: true
  properties:
    description: Per instance (same order), the unit's C(Key=value) settings to run under.
    type: list
    elements: list
    required: true
  base_environment:
    description: Environment every instance gets before its own.
    type: dict
    default: {}
  command:
    description: The runtime's check command (C(--expect N) is appended).
    type: list
    elements: str
    required: true
  timeout:
    description: Seconds each check may take.
    type: int
    default: 300
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Check CUDA inside each instance's sandbox
  sglang.fleet.sglang_cuda_check:
    host: "{{ inventory_hostname }}"
    instances: "{{ sglang_instances }}"
    properties: "{{ sglang_instances | map('sglang.fleet.sglang_server_unit_properties', _sglang_server_sandbox) | list }}"
    command: ["/opt/sglang/sglang-0.5.23/bin/python", "/opt/sglang/sglang-0.5.23/cuda_smoke_check.py"]
"""

RETURN = r"""
problems:
  description: >-
    One line per failed instance, "<host> instance <name>: sglang_gpu_ids=[...]: <cause>; fix: ...".
  returned: always
  type: list
checked:
  description: Per instance, what its check printed (devices seen, all-reduce) and how long it took.
  returned: always
  type: dict
"""

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import process_calls, sandboxed

FIX = (
    "the unit would start with the same settings and fail; check the GPUs' device nodes (ls -l /dev/nvidia*), "
    "the driver (nvidia-smi) and the instance's environment, then rerun; README 'Deploying to real hosts' shows the command"
)


def systemd_run(name: str, properties: list[str], env_file: str, command: list[str]) -> list[str]:
    return sandboxed.systemd_run(f"sglang-cuda-check-{name}-{os.getpid()}", properties, env_file, command)


# What Python prints when the check's script (or the simulator's module) is not there: the runtime was installed
# with it, so it was removed or its install was cut short. sglang-fleet has no earlier release whose runtime lacks it.
CHECK_MISSING = ("can't open file", "No module named sglang_simulator.cuda_check")
FIX_MISSING = (
    "the runtime is installed with its check, so this one is incomplete; restore the file or remove the runtime's venv "
    "(sglang_venv_root/<runtime>-<version>) so that the next deploy installs it again"
)


def verdict(output: str, returncode: int) -> dict[str, Any]:
    """The check's JSON line (its last line), or what went wrong when it printed none (a check that did not run fails)."""
    for line in reversed(output.strip().splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict):
            return result
    tail = " ".join(output.strip().splitlines()[-3:]) or f"exit status {returncode}"
    if any(marker in output for marker in CHECK_MISSING):
        return {"ok": False, "error": f"the check's script is missing ({tail})", "fix": FIX_MISSING}
    return {"ok": False, "error": f"the check did not run: {tail}"}


def run_checks(
    host: str,
    instances: list[dict[str, Any]],
    properties: list[list[str]],
    base_environment: dict[str, str],
    command: list[str],
    timeout: float,
    spawn: Callable[[list[str]], Any] = process_calls.piped,
    run_dir: str = "/run",
) -> dict[str, Any]:
    started: dict[str, tuple[Any, str, float]] = {}
    try:
        for instance, unit_properties in zip(instances, properties, strict=True):
            sandboxed.require_account(unit_properties)
            env_file = sandboxed.environment_file({**base_environment, **instance["environment"]}, run_dir)
            gpus = len(instance["gpu_ids"])
            argv = systemd_run(instance["name"], unit_properties, env_file, [*command, "--expect", str(gpus)])
            if gpus > 1:
                argv.append("--all-reduce")
            process = spawn(argv)
            started[instance["name"]] = (process, env_file, time.monotonic())
        checked: dict[str, Any] = {}
        problems = []
        for instance in instances:
            process, _env_file, began = started[instance["name"]]
            try:
                output, _stderr = process.communicate(timeout=max(1.0, timeout - (time.monotonic() - began)))
                result = verdict(output, process.returncode)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                result = {"ok": False, "error": f"no answer within {timeout:.0f} s"}
            result["seconds"] = round(time.monotonic() - began, 1)
            checked[instance["name"]] = result
            if not result.get("ok"):
                problems.append(
                    f"{host} instance {instance['name']}: sglang_gpu_ids={json.dumps(instance['gpu_ids'])}: "
                    f"CUDA smoke check in the unit's sandbox failed: {result.get('error')}; fix: {result.get('fix', FIX)}"
                )
        return {"problems": problems, "checked": checked}
    finally:
        for _process, env_file, _began in started.values():
            os.unlink(env_file)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "instances": {"type": "list", "elements": "dict", "required": True},
            "properties": {"type": "list", "elements": "list", "required": True},
            "base_environment": {"type": "dict", "default": {}},
            "command": {"type": "list", "elements": "str", "required": True},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    params = module.params
    result = run_checks(
        params["host"],
        params["instances"],
        params["properties"],
        {str(k): str(v) for k, v in params["base_environment"].items()},
        params["command"],
        params["timeout"],
    )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
