#!/usr/bin/python
"""Documentation of the action plugin sglang_plan, which gathers the host's facts as module sglang_host_facts does and
derives the plan on the control node (no module code of its own)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_plan
short_description: Gathers a host's facts as sglang_host_facts does and derives its SGLang instances from them, in one task
description:
  - An action plugin. Gathers what module sglang_host_facts gathers, with I(host_facts) (one round trip, through module
    sglang_instance_files' C(facts) - the module deploy's probe calls next, so that both calls share one module
    payload, which Ansible builds once per run), then derives the host's plan from I(settings) and that answer on the
    control node, as the filter sglang_plan does.
  - Returns the module's answer (its C(ansible_facts), C(sglang_host) with Ansible's own, set as the host's facts; the
    C(model) and C(group_models) it read) and C(plan). Role sglang_plan publishes the plan with set_fact.
  - Never changes the host.
options:
  host_facts:
    description:
      - The options of module sglang_host_facts.
      - Where its C(model) names no C(path), the action adds the served model directory (the settings' C(model_path))
        and, for an C(sglang_model), its C(current) link beside it.
      - By default from the host's variables (role sglang_plan's, the server role's and the venv role's, in Python - each
        read once) - C(nvidia_smi) (C(sglang_plan_nvidia_smi)), C(gather_subset) (C(sglang_plan_gather_subset)), the C(model)'s
        files checked by their SHA-256 (the lock file's for an C(sglang_model), else C(sglang_model_sha256)) as the
        servers' account (C(sglang_server_user), C(sglang_server_group)), C(verified_file)
        (C(sglang_plan_verified_file)), C(tokenizer_paths) (the servers' C(--tokenizer-path) directories) and
        C(group_models) (the instance groups' own model directories), and C(pythons) (C(sglang_venv_python), unless it
        cannot be known before the host's facts or is no string).
    type: dict
  settings:
    description:
      - The host's plan settings, the filter sglang_plan's first argument.
      - By default gathered from the host's variables (role sglang_plan's, and the other roles' it reads with their
        defaults) in Python (plugins/plugin_utils/plan_settings.py), as Ansible templates each of them.
    type: dict
  support_tables:
    description:
      - Every supported SGLang version's support table, or its file's path (read as plain JSON).
      - By default the paths of the role's C(files/sglang-*.json).
    type: list
    elements: raw
author: sglang-fleet maintainers (@sglang-fleet)
"""

EXAMPLES = r"""
- name: Gather the host's facts and derive its instances
  sglang.fleet.sglang_plan:
    host_facts:
      nvidia_smi: nvidia-smi
      gather_subset: [min, systemd]
      model: {path: /srv/models/Qwen3.6-27B}
  register: planned
"""

RETURN = r"""
plan:
  description: >-
    The filter sglang_plan's result - C(instances), C(problems) (one line each naming host, instance, variable, value and
    fix) and, where the plan has them, C(reshape) and C(disk_needs).
  returned: unless the module failed
  type: dict
model:
  description: The model directory as module sglang_host_facts read it.
  returned: when I(host_facts.model) is given
  type: dict
ansible_facts:
  description: The module's facts - C(sglang_host) and Ansible's own of I(host_facts.gather_subset).
  returned: unless the module failed
  type: dict
"""
