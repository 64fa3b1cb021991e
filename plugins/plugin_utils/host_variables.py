"""A host's variable as an action plugin reads it: its value templated only where it is a template (Templar.template
compiles only a string that is one: a plain setting costs no compile, where evaluating the expression `name` in a task's
argument compiled one per variable and host)."""

from __future__ import annotations

from typing import Any

MISSING: Any = object()


def host_variable(templar: Any, task_vars: dict[str, Any], name: str, default: Any = MISSING) -> Any:
    """`name`'s value as Ansible templates it, or `default` where the host has no such variable (`MISSING`: Ansible's
    own error for an undefined variable); hostvars as it is (it templates what is read)."""
    if name not in task_vars:
        if default is not MISSING:
            return default
        return templar.resolve_variable_expression(name)
    if name == "hostvars":
        return task_vars[name]
    return templar.template(task_vars[name])
