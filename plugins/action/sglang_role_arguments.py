"""Action plugin: check the arguments of several of the collection's role entry points in one task.

Ansible checks a role's arguments in a task of its own that it puts before the entry point's tasks (each task forks a
worker per host), and loads the role's argument specs each time the role is imported to do so. deploy.yml checks the
entry points it runs in two tasks instead, and imports them with `rolespec_validate: false`. Each entry point is checked
as Ansible checks it: its options' values templated as its role sees them (with its `role_path` and `role_name`), then
ArgumentSpecValidator with the role's spec.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.plugin_utils import safe_yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"

ARGUMENT_SPEC: dict[str, Any] = {
    "entry_points": {"type": "dict", "required": True},
    "published_later": {"type": "list", "elements": "str", "default": []},
}


@functools.cache
def argument_specs(role: str) -> dict[str, Any]:
    """The role's meta/argument_specs.yml, by entry point."""
    path = ROLES / role / "meta" / "argument_specs.yml"
    try:
        with path.open("rb") as text:
            specs = safe_yaml.load(text)["argument_specs"]
    except (OSError, KeyError, TypeError) as error:
        raise AnsibleActionFail(f"role {role}: no argument specs in {path} ({error})") from error
    return dict(specs)


def options(role: str, entry_point: str, published_later: list[str]) -> dict[str, Any]:
    """The entry point's options, less those named in `published_later`."""
    specs = argument_specs(role)
    if entry_point not in specs:
        raise AnsibleActionFail(f"role {role} has no entry point {entry_point!r} in its argument specs")
    found: dict[str, Any] = specs[entry_point].get("options") or {}
    return {name: option for name, option in found.items() if name not in published_later}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `entry_points`, the collection's role (its name under roles/) and entry point to check, as
    {role: entry_point}; `published_later`, the options left out: facts another role publishes later in the same play,
    which do not exist yet. Fails, changing nothing, with every error of every entry point, each naming its role, entry
    point and variable."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _validated, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        task_vars = task_vars or {}
        errors: list[str] = []
        for role, entry_point in args["entry_points"].items():
            spec = options(role, entry_point, args["published_later"])
            as_the_role_sees_them = {**task_vars, "role_path": str(ROLES / role), "role_name": role}
            templar = self._templar.copy_with_new_env(available_variables=as_the_role_sees_them)
            values = templar.template({name: task_vars[name] for name in spec if name in task_vars})
            checked = ArgumentSpecValidator(spec).validate(values, validate_role_argument_spec=True)
            errors += [f"role {role}, entry point {entry_point}: {message}" for message in checked.error_messages]
        checked_names = [f"{role} ({entry_point})" for role, entry_point in args["entry_points"].items()]
        if errors:
            result.update(failed=True, argument_errors=errors, msg="Validation of arguments failed:\n" + "\n".join(errors))
        else:
            result.update(changed=False, msg="The arguments of " + ", ".join(checked_names) + " are valid")
        return result
