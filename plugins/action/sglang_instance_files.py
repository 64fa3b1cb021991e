"""Action plugin: render every instance's templates on the control node and write them with one module call.

A template task per file costs a round trip to the host per file and per run, so a host of seven instances paid
seven times what a host of one did for a deploy that changes nothing. Here the host gets one payload; the module
of the same name writes only what differs and reports, per instance, whether anything did.
"""

from __future__ import annotations

import os
from typing import Any

from ansible._internal._templating import _template_vars
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

# The template action's defaults, so a file rendered here is byte for byte what ansible.builtin.template writes.
OVERRIDES = {"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `instances`; `templates`, each {src, file, owner, group, mode, private} (a private file may hold
    secrets: never logged, never in a diff), rendered once per instance to the path its planned `files` give under
    `file` (unit, environment, secret; an instance without that file, e.g. a key file without a key, gets none);
    `files`, each {src, dest, owner, group, mode, template, vars, private}, a file of the role's files/ copied as it
    is (or of templates/, rendered, with `template`, and `vars`, variables of that file alone), or {content, dest,
    ...} with the content given (`private` as for templates); `loop_var` (the name the templates know the instance
    by, default sglang_server_instance); `read`, what to read on the host in the same call (the module's option)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("instances", "templates", "files", "loop_var", "read"))

    def render(self, src: str, source: str, dest: str, task_vars: dict[str, Any], extra: dict[str, Any]) -> str:
        """The template at `source` rendered as ansible.builtin.template would for `dest`, with `extra` variables."""
        template_vars = {
            **task_vars,
            **extra,
            **_template_vars.generate_ansible_template_vars(
                path=src, fullpath=source, dest_path=dest, include_ansible_managed="ansible_managed" not in task_vars
            ),
        }
        searchpath = [*template_vars.get("ansible_search_path", []), os.path.dirname(source)]
        searchpath = [path for base in searchpath for path in (os.path.join(base, "templates"), base)]
        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=template_vars)
        data = trust_as_template(self._loader.get_text_file_contents(source))
        return str(templar.template(data, escape_backslashes=False, overrides=OVERRIDES) or "")

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        loop_var = str(args.get("loop_var", "sglang_server_instance"))
        files: list[dict[str, Any]] = []
        private_contents: list[str] = []
        owner_of = {}

        def add(path: str, content: str, attributes: dict[str, Any], private: bool) -> None:
            """One file to write; a private one's content travels apart, never logged, never in a diff."""
            spec = {"path": path, **{key: attributes[key] for key in ("owner", "group", "mode")}}
            if private:
                spec["private"] = len(private_contents)
                private_contents.append(content)
            else:
                spec["content"] = content
            files.append(spec)

        try:
            for template in args.get("templates") or []:
                source = self._find_needle("templates", template["src"])
                for instance in args.get("instances") or []:
                    dest = instance["files"][template["file"]]
                    if not dest:
                        continue
                    content = self.render(template["src"], source, dest, task_vars, {loop_var: instance})
                    add(dest, content, template, bool(template.get("private")))
                    owner_of[dest] = instance["name"]
            for single in args.get("files") or []:
                if "content" in single:
                    content = str(single["content"])
                else:
                    source = self._find_needle("templates" if single.get("template") else "files", single["src"])
                    content = (
                        self.render(single["src"], source, single["dest"], task_vars, dict(single.get("vars") or {}))
                        if single.get("template")
                        else self._loader.get_text_file_contents(source)
                    )
                add(single["dest"], content, single, bool(single.get("private")))
        except AnsibleActionFail as error:
            return {**result, "failed": True, "msg": str(error)}
        module_result = self._execute_module(
            module_name="sglang.fleet.sglang_instance_files",
            module_args={"files": files, "private_contents": private_contents}
            | ({"read": args["read"]} if args.get("read") is not None else {}),
            task_vars=task_vars,
        )
        result.update(module_result)
        changed = set(module_result.get("changed_paths") or [])
        result["changed_instances"] = sorted({owner_of[path] for path in changed if path in owner_of})
        if not self._task.diff:
            result.pop("diff", None)
        return result
