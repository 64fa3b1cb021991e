"""Action plugin: gather a host's facts with module sglang_host_facts and derive its plan from them, in one task.

The plan needs the host's answer (its GPUs, ports, model directory) and nothing else of the host. Deriving it here, on
the control node, as the task's own step spares a task of every run (each forks a worker per host) that derived it
from the registered answer. The role publishes it with set_fact, as before.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan

ARGUMENT_SPEC: dict[str, Any] = {
    "host_facts": {"type": "dict", "required": True},
    "settings": {"type": "dict", "required": True},
    "support_tables": {"type": "list", "elements": "raw", "required": True},
}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `host_facts`, the options of module sglang_host_facts; `settings`, the host's plan settings (the
    filter sglang_plan's first argument); `support_tables`, every supported SGLang's support table or its file's path.
    Returns the module's answer, and `plan`: what the filter sglang_plan derives from the settings and that answer."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        module_args = dict(args["host_facts"])
        answer: dict[str, Any] = self._execute_module(
            module_name="sglang.fleet.sglang_host_facts", module_args=module_args, task_vars=task_vars or {}
        )
        result.update(answer)
        if answer.get("failed"):
            return result
        host = {
            **answer["ansible_facts"]["sglang_host"],
            "model": answer.get("model"),
            "group_models": answer.get("group_models", {}),
        }
        result["plan"] = sglang_plan(args["settings"], host, args["support_tables"])
        return result
