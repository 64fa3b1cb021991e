"""Action plugin: gather a host's facts as module sglang_host_facts does and derive its plan from them, in one task.

The plan needs the host's answer (its GPUs, ports, model directory) and nothing else of the host. Deriving it here, on
the control node, as the task's own step spares a task of every run (each forks a worker per host) that derived it
from the registered answer. The role publishes it with set_fact, as before.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
from ansible_collections.sglang.fleet.plugins.module_utils.multinode import rendezvous_checks, spans_hosts
from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import host_variable
from ansible_collections.sglang.fleet.plugins.plugin_utils.plan_settings import (
    constraints_versions,
    host_facts_options,
    plan_settings,
    support_tables,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "host_facts": {"type": "dict"},
    "settings": {"type": "dict"},
    "support_tables": {"type": "list", "elements": "raw"},
}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `host_facts`, the options of module sglang_host_facts (its `model` gets the served directory's
    `path`, and its `link` for an sglang_model, where the task names none; by default from the host's variables,
    plugin_utils/plan_settings.py host_facts_options, each read once); `settings`, the host's plan settings (the
    filter sglang_plan's first argument; by default gathered from the host's variables, plugin_utils/plan_settings.py);
    `support_tables`, every supported SGLang's support table or its file's path (by default the role's
    files/sglang-*.json). Returns the module's answer; `plan`: what the filter sglang_plan derives from the
    settings and that answer; and `rendezvous`, the TCP check between the nodes of instances across hosts that the
    role's next tasks make (module_utils/multinode.py rendezvous_checks), none where the plan has problems."""

    TRANSFERS_FILES = False

    def variable(self, task_vars: dict[str, Any], name: str, default: Any) -> Any:
        """`name`'s value as Ansible templates it, or `default` where the host has no such variable
        (plugin_utils/host_variables.py)."""
        return host_variable(self._templar, task_vars, name, default)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        task_vars = task_vars or {}
        role_path = str(task_vars.get("role_path", ""))
        settings = args["settings"]

        def variable(name: str, default: Any) -> Any:
            return self.variable(task_vars, name, default)

        if settings is None:
            host = str(task_vars["inventory_hostname"])
            names = task_vars["hostvars"][host].keys() if "hostvars" in task_vars else []
            versions = constraints_versions(os.path.join(role_path, "..", "sglang_venv", "files"))
            settings = plan_settings(variable, host, names, versions)
        tables = args["support_tables"]
        if tables is None:
            tables = support_tables(os.path.join(role_path, "files"))
        module_args = dict(args["host_facts"] if args["host_facts"] is not None else host_facts_options(variable, settings))
        model = module_args.get("model")
        if isinstance(model, dict) and "path" not in model:
            sourced = settings["model_sourced"]
            link = f"{os.path.dirname(settings['model_path'])}/current" if sourced else ""
            module_args["model"] = {**model, "path": settings["model_path"], "link": link}
        # The nodes of instances across hosts: the interface each node reaches rank 0 on (module_utils/multinode.py).
        addresses = settings.get("node_addresses") or {}
        if addresses:
            module_args["routes_to"] = sorted(set(addresses.values()))
        # Module sglang_instance_files gathers them (its `facts`: sglang_host_facts' options and answer): deploy's probe
        # calls that module next, and Ansible builds a module's payload once per run, so the two calls share one.
        answer: dict[str, Any] = self._execute_module(
            module_name="sglang.fleet.sglang_instance_files", module_args={"facts": module_args}, task_vars=task_vars
        )
        for files_only in ("changed_paths", "diff"):  # the module's answer of files, of which this call sends none
            answer.pop(files_only, None)
        result.update(answer)
        if answer.get("failed"):
            return result
        host_found = {
            **answer["ansible_facts"]["sglang_host"],
            "model": answer.get("model"),
            "group_models": answer.get("group_models", {}),
        }
        result["plan"] = sglang_plan(settings, host_found, tables)
        result["rendezvous"] = rendezvous(result["plan"], host_found.get("listening") or [])
        # Whether the tasks that check an instance across hosts as a whole run on this host (tasks/nodes.yml).
        result["spans_hosts"] = spans_hosts({"sglang_instances": result["plan"]["instances"]})
        return result


def rendezvous(plan: dict[str, Any], listening: list[dict[str, Any]]) -> dict[str, Any]:
    """The nodes' TCP check of the planned instances (rendezvous_checks), with the ports the host listens on; none
    where the plan has problems (preflight stops on them: the nodes are not checked against a plan it refuses)."""
    if plan["problems"]:
        return {"listen": [], "reach": []}
    return rendezvous_checks(plan["instances"], listening)
