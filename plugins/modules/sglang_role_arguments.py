#!/usr/bin/python
"""Documentation of the action plugin sglang_role_arguments, which runs on the control node only (no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_role_arguments
short_description: Checks the arguments of several of the collection's role entry points in one task
description:
  - An action plugin, run on the control node and never on a host; changes nothing.
  - For each role and entry point of I(entry_points), checks the variables its argument spec (the role's
    C(meta/argument_specs.yml)) names as Ansible checks them before the entry point's tasks run. Each value is templated
    as the role sees it (its C(role_path) and C(role_name) set), then validated against the spec.
  - Ansible checks a role's arguments in a task of its own, which forks a worker per host; deploy.yml checks the six
    entry points of its preflight in two tasks and imports them with C(rolespec_validate=false).
  - Fails with every error of every entry point, each naming its role, its entry point and the variable.
options:
  entry_points:
    description:
      - The collection's roles (their folder under C(roles/)), each with the name of its entry point to check.
    type: dict
    required: true
  published_later:
    description:
      - Options to leave out, as not set yet - facts another role publishes later in the same play, right before the
        entry points that need them run.
    type: list
    elements: str
    default: []
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Check the settings of CUDA, the runtime, the servers and the routers
  sglang.fleet.sglang_role_arguments:
    entry_points: {cuda: preflight, sglang_venv: preflight, sglang_server: preflight, sglang_router: preflight}
    published_later: [cuda_environment, sglang_runtime, sglang_service]
"""

RETURN = r"""
argument_errors:
  description: Every error found, each prefixed with its role and entry point, as C(role cuda, entry point preflight:).
  returned: failure
  type: list
  elements: str
"""
