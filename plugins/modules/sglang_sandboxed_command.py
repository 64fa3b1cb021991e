#!/usr/bin/python
"""Ansible module: run a command as the servers' account in their units' sandbox (preflight's parser check)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_sandboxed_command
short_description: Runs a command under a unit's account, sandbox and environment, never as root
description:
  - Runs I(argv) in a transient unit (C(systemd-run --wait --pipe)) with the unit properties I(properties) (the
    instances' C(User=), C(Group=), device and sandbox settings) and the environment I(environment) (a 0600 file in
    C(/run) that systemd reads, removed afterwards); I(stdin) is its input.
  - Nothing of the caller's environment reaches the command. Preflight's parser check runs so (SGLang's parser loads
    the model's config, and with C(--trust-remote-code) the model's own Python), as the CUDA smoke check does.
  - Changes nothing; runs in check mode too.
options:
  name:
    description: A name for the transient unit (C(sglang-<name>-<pid>.service)).
    type: str
    required: true
  argv:
    description: The command and its arguments.
    type: list
    elements: str
    required: true
  properties:
    description: Unit properties (C(Key=value)), as the instances' units have them.
    type: list
    elements: str
    required: true
  environment:
    description: The command's environment.
    type: dict
    default: {}
  stdin:
    description: The command's input.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for the command.
    type: int
    default: 300
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Check the servers' arguments with SGLang's own parser, as the servers' account in their sandbox
  sglang.fleet.sglang_sandboxed_command:
    name: parse-check
    argv: ["/opt/sglang/sglang-0.5.23/bin/python", "/opt/sglang/sglang-0.5.23/check_args.py"]
    stdin: "{{ arguments | to_json }}"
    properties: "{{ sglang_instances | sglang.fleet.sglang_server_host_properties(sglang_service.sandbox) }}"
    environment: "{{ sglang_service.environment }}"
  register: parsed
  check_mode: false
  no_log: true
"""

RETURN = r"""
rc:
  description: The command's exit status (systemd-run's, which is the command's with C(--wait)); -1 when it timed out.
  returned: always
  type: int
stdout:
  description: What the command printed.
  returned: always
  type: str
stderr:
  description: What the command (or systemd-run) printed on its error stream.
  returned: always
  type: str
cmd:
  description: The systemd-run command line (the environment is in a file, not on it).
  returned: always
  type: list
"""

import os
import subprocess
from collections.abc import Callable
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import sandboxed


def run(
    name: str,
    argv: list[str],
    properties: list[str],
    environment: dict[str, str],
    stdin: str = "",
    timeout: float = 300,
    runner: Callable[..., Any] = subprocess.run,
    run_dir: str = "/run",
) -> dict[str, Any]:
    sandboxed.require_account(properties)
    env_file = sandboxed.environment_file(environment, run_dir)
    # The transient unit is stopped at the timeout even if this process is gone by then.
    limited = [*properties, f"RuntimeMaxSec={max(1, int(timeout))}"]
    command = sandboxed.systemd_run(f"sglang-{name}-{os.getpid()}", limited, env_file, argv)
    try:
        done = runner(command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "cmd": command}
    except subprocess.TimeoutExpired:
        return {"rc": -1, "stdout": "", "stderr": f"no answer within {timeout:.0f} s", "cmd": command}
    finally:
        os.unlink(env_file)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "argv": {"type": "list", "elements": "str", "required": True},
            "properties": {"type": "list", "elements": "str", "required": True},
            "environment": {"type": "dict", "default": {}},
            "stdin": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    params = module.params
    result = run(
        params["name"],
        params["argv"],
        params["properties"],
        {str(key): str(value) for key, value in params["environment"].items()},
        params["stdin"],
        params["timeout"],
    )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
