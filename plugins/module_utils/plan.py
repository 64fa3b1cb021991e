"""The fleet's one data model: a host's SGLang settings and facts become its instances and its problems.

`plan_host(settings, facts, tables, known_variables)` (the filter sglang_plan) returns {"instances": [...],
"problems": [...], "reshape": {...}, "disk_needs": [...]}. Every other role reads the instances; preflight fails the
deploy when any host has a problem. Each problem is one line naming host, instance, variable, value and fix.
`tables` are the support tables of every SGLang version sglang-fleet supports
(roles/sglang_plan/files/sglang-<version>.json); settings["version"] picks the pinned one, and the others say what a
host moving between versions gains or loses.

The steps live by concern: sglang_support (the tables, each flag checked against them), server_settings (server
args, speculative settings, environment, control characters, variable names), instances (derivation and files),
instance_checks (values, model, what a multimodal model loads at start, memory, GPUs, ports), reshape (a change of
the host's shape).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.instance_checks import (
    checked_model,
    gpu_and_port_problems,
    memory_problems,
    model_access_problems,
    model_code_problems,
    model_problems,
    model_room_need,
    model_source_problems,
    multimodal_start_problems,
    value_problems,
)
from ansible_collections.sglang.fleet.plugins.module_utils.instance_groups import GroupProblems, checked_groups, group_settings
from ansible_collections.sglang.fleet.plugins.module_utils.instances import derive_instances, gpu_device
from ansible_collections.sglang.fleet.plugins.module_utils.multinode import node_instance, node_settings, rendezvous_problems
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems
from ansible_collections.sglang.fleet.plugins.module_utils.reshape import reshape
from ansible_collections.sglang.fleet.plugins.module_utils.server_settings import (
    check_environment,
    control_character,
    control_problems,
    unknown_variable_problems,
)
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import Support, pinned_support, version_key


def plan_group(
    problems: HostProblems, settings: Mapping[str, Any], facts: Mapping[str, Any], gpu_ids: list[int], support: Support
) -> list[dict[str, Any]]:
    """One group's instances (a host without groups is one) on `gpu_ids`, with the problems of their settings and
    model; each carries its model's weight bytes (`weight_bytes`) for the host's memory checks."""
    on_host = facts.get("model") or {}
    if settings.get("group_model"):
        # A group's own model directory, read by the same probe (sglang_host_facts' group_models).
        on_host = (facts.get("group_models") or {}).get(settings["model_path"]) or {}
    model = checked_model(settings, on_host)
    instances = derive_instances(problems, settings, gpu_ids, facts.get("gpus") or [], support)
    value_problems(problems, support, instances, model)
    devices = {gpu["index"]: gpu_device(gpu) for gpu in facts.get("gpus") or []}
    weight_bytes = model_problems(problems, settings, model, instances, support)
    for instance in instances:
        # The device nodes the instance may open (its unit allows only these and the driver's shared ones).
        instance["gpu_devices"] = [devices[gpu] for gpu in instance["gpu_ids"] if devices.get(gpu)]
        instance["weight_bytes"] = weight_bytes
    multimodal_start_problems(problems, settings, model, instances, support)
    model_access_problems(problems, settings, model)
    model_code_problems(problems, support, settings, model, instances)
    return instances


def plan_host(
    settings: Mapping[str, Any],
    facts: Mapping[str, Any],
    tables: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    known_variables: frozenset[str],
) -> dict[str, Any]:
    """Derives a host's instances from its settings and facts and lists every problem found.

    `tables`: the support tables of every supported version (one table alone is taken as the pinned one);
    `known_variables`: every sglang_*/cuda_* variable a role reads (a host's other ones are typos).
    """
    problems = HostProblems(host=str(settings["host"]))
    pinned = pinned_support(problems, str(settings.get("version") or ""), tables)
    if pinned is None:
        return {"instances": [], "problems": problems.lines}
    support = pinned
    constraints = settings.get("constraints_versions")
    if constraints is not None and support.version not in constraints:
        problems.add(
            "host",
            "sglang_version",
            support.version,
            f"roles/sglang_venv/files/constraints-{support.version}.txt is missing (the exact packages of SGLang "
            f"{support.version} the wheelhouse installs)",
            "resolve it as that file's header for another version says, or pin "
            + " / ".join(sorted(constraints, key=version_key, reverse=True)),
        )
    detected = [gpu["index"] for gpu in facts.get("gpus") or []]
    if facts.get("gpu_error"):
        lines = str(facts["gpu_error"]).strip().splitlines() or ["?"]
        problems.add(
            "host",
            "sglang_plan_nvidia_smi",
            settings.get("nvidia_smi", "nvidia-smi"),
            f"GPUs could not be listed: {lines[-1]}",
            "install the NVIDIA driver (nvidia-smi must list the GPUs)",
        )
        return {"instances": [], "problems": problems.lines}
    unknown_variable_problems(problems, settings.get("variable_names"), known_variables)
    if control_problems(problems, settings, support) or control_character(settings.get("server_text")):
        # Such a value must not reach a template, not even preflight's check-mode rendering (the server role's
        # preflight names its own variables).
        return {"instances": [], "problems": problems.lines}
    # The runtime's environment (sglang_venv role) reaches every server and preflight's parser check: the same
    # check as the servers' own environment (LD_*, PYTHON* refused).
    check_environment(problems, support, "host", "sglang_venv_runtime_environment", settings.get("runtime_environment") or {})
    groups = checked_groups(problems, settings.get("instance_groups"))
    if groups is None:
        return {"instances": [], "problems": problems.lines}
    # What the deploy will write on the host's filesystems: checked here alone, and published for the install's
    # room check (role sglang_venv), which sums what goes to one filesystem.
    need = model_room_need(settings, facts.get("model") or {})
    model_source_problems(problems, settings, need)
    gpu_ids = [int(gpu) for gpu in settings["gpu_ids"]] if settings["gpu_ids"] else detected
    instances: list[dict[str, Any]] = []
    whole_host: list[dict[str, Any] | None] = [None]
    for group in groups or whole_host:
        # Group after group on the GPUs left and the ports after the instances before it.
        used = {gpu for instance in instances for gpu in instance["gpu_ids"]}
        free = [gpu for gpu in gpu_ids if gpu not in used]
        if group is None:
            instances += plan_group(problems, settings, facts, free, support)
        else:
            own = group_settings(settings, group, len(instances))
            node = node_settings(problems, settings, group)
            if node is None:
                continue
            if node:
                own.update(nnodes=node["nnodes"], instance_count=1)
            planned = plan_group(GroupProblems(problems, group), own, facts, free, support)
            instances += [
                {**(node_instance(instance, node, own, facts) if node else instance), "group": group["name"]}
                for instance in planned
            ]
    memory_problems(problems, settings, facts, instances)
    gpu_and_port_problems(problems, settings, facts, instances)
    rendezvous_problems(problems, facts, instances)
    return {
        "instances": instances,
        "problems": problems.lines,
        "reshape": reshape(instances, facts),
        "disk_needs": [need] if need else [],
    }
