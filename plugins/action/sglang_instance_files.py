"""Action plugin: render every instance's templates on the control node and write them with one module call.

A template task per file costs a round trip to the host per file and per run, so a host of seven instances paid
seven times what a host of one did for a deploy that changes nothing. Here the host gets one payload; the module
of the same name writes only what differs and reports, per instance, whether anything did.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable
from typing import Any

import jinja2
import jinja2.nodes
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.template import generate_ansible_template_vars, trust_as_template
from ansible_collections.sglang.fleet.plugins.module_utils import role_decisions

# The template action's defaults, so a file rendered here is byte for byte what ansible.builtin.template writes.
OVERRIDES = {"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"}


# Parses (never compiles) the instances' templates, for the names they read (a loop's own names among them, which no host
# variable shadows): jinja2's own syntax and the extensions ansible-core's environment may enable; a template it cannot
# parse settles nothing (each render templates them, as before).
PARSER = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"])

# The template texts render_each renders once for all the instances: literal text and expressions made of these jinja2
# nodes only, calling no method but these (which only read); anything else (an include, import, macro, block or
# parent template, a lookup or any other call, {% do %}, a method that changes a value every render would share, the
# template's own `loop` outside a loop of its own, an override header) is rendered once per render.
BATCHABLE = (
    jinja2.nodes.Template, jinja2.nodes.Output, jinja2.nodes.TemplateData, jinja2.nodes.Name, jinja2.nodes.Getattr,
    jinja2.nodes.Getitem, jinja2.nodes.Slice, jinja2.nodes.Const, jinja2.nodes.List, jinja2.nodes.Tuple,
    jinja2.nodes.Dict, jinja2.nodes.Pair, jinja2.nodes.Keyword, jinja2.nodes.Filter, jinja2.nodes.Test,
    jinja2.nodes.CondExpr, jinja2.nodes.BinExpr, jinja2.nodes.UnaryExpr, jinja2.nodes.Compare, jinja2.nodes.Operand,
    jinja2.nodes.Concat, jinja2.nodes.If, jinja2.nodes.For, jinja2.nodes.Assign, jinja2.nodes.Call,
)  # fmt: skip
READING_METHODS = frozenset(("items", "keys", "values", "get", "split", "rsplit", "strip", "lstrip", "rstrip",
                             "startswith", "endswith", "lower", "upper", "replace", "join", "splitlines"))  # fmt: skip
# As Ansible's template action parses a template's text (OVERRIDES; ansible-core's extensions).
BATCH_PARSER = jinja2.Environment(
    extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"], trim_blocks=True, lstrip_blocks=False, newline_sequence="\n"
)
# One trailing newline (of any kind), which jinja2 drops from a template's text before it parses it.
TRAILING_NEWLINE = re.compile(r"(\r\n|\r|\n)\Z")


class PerRender(Exception):
    """A variable read what only a render names (the instance, template_*): see PER_RENDER."""


class _PerRender:
    """Stands, while the action settles the variables its templates read, for what each render names for itself:
    any use of it raises PerRender."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise PerRender()

    __getattr__ = __getitem__ = __iter__ = __len__ = __contains__ = __call__ = _refuse
    __str__ = __repr__ = __bool__ = __int__ = __float__ = __index__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __add__ = __radd__ = __mod__ = _refuse
    __hash__ = None  # type: ignore[assignment]


PER_RENDER = _PerRender()


def generated_names() -> list[str]:
    """The variables Ansible gives every template of its own (template_path, template_destpath, ansible_managed...)."""
    return list(generate_ansible_template_vars(path=__file__, fullpath=__file__, dest_path=__file__))


def template_vars(src: str, source: str, dest: str | None, task_vars: dict[str, Any]) -> dict[str, Any]:
    """The variables Ansible gives the template at `source` rendered for `dest`; an ansible_managed the user set is
    kept, as the template action keeps it."""
    generated: dict[str, Any] = generate_ansible_template_vars(path=src, fullpath=source, dest_path=dest)
    if "ansible_managed" in task_vars:
        generated.pop("ansible_managed", None)
    return generated


MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")


def module_utils_file(name: str) -> str:
    """The path of this collection's module_utils file `name` (a plain file name, nothing else)."""
    path = os.path.join(MODULE_UTILS, name)
    if os.path.basename(name) != name or not name.endswith(".py") or not os.path.isfile(path):
        raise AnsibleActionFail(f"{name}: no such file in the collection's module_utils")
    return path


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `instances`; `templates`, each {src, file, owner, group, mode, private} (a private file may hold
    secrets: never logged, never in a diff), rendered once per instance to the path its planned `files` give under
    `file` (unit, environment, secret; an instance without that file, e.g. a key file without a key, gets none);
    `files`, each {src, dest, owner, group, mode, template, vars, private}, a file of the role's files/ copied as it
    is (an absolute `src`: that file of the control node, e.g. the operator's certificate and key; or of templates/,
    rendered, with `template`, and `vars`, variables of that file alone), or {content, dest,
    ...} with the content given (`private` as for templates), or {module_utils, dest, ...}, a file of this collection's
    module_utils copied as it is (a helper that runs outside Ansible uses the modules' code, not a copy of it);
    `loop_var` (the name the templates know the instance by, default sglang_server_instance); `read`, what to read on
    the host in the same call (the module's option).
    Or `requests`: several of those (each with `role_path`, the role whose templates/ and files/ its `src` names), by
    name, all handled in the one call and answered in `answers` under their names (deploy's probe); or a list of
    variable names, each variable a request with its `name` (read here: a published fact is not templated again, and
    the list itself is no template to template on every read); a request's
    `routers` (the module's option; each `api_key` travels as a private content) are compared there too. A request's
    `decide` (settings, never sent to the host) makes its role's decision from its answer (module_utils/role_decisions.py),
    returned in the answer's `decision`; `changes` is every role's changes, in the requests' order."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("instances", "templates", "files", "loop_var", "read", "requests"))

    def render(self, src: str, source: str, dest: str, task_vars: dict[str, Any], extra: dict[str, Any]) -> str:
        """The template at `source` rendered as ansible.builtin.template would for `dest`, with `extra` variables."""
        text = self._loader.get_text_file_contents(source)
        return self.rendered(source, text, {**task_vars, **extra, **template_vars(src, source, dest, task_vars)})

    def rendered(self, source: str, text: str, variables: dict[str, Any]) -> str:
        """`text` (the template at `source`'s, or one made of it) rendered as the template action renders it, with
        `variables`: the template's folder and the play's search path its includes are looked up in."""
        searchpath = [*variables.get("ansible_search_path", []), os.path.dirname(source)]
        searchpath = [path for base in searchpath for path in (os.path.join(base, "templates"), base)]
        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=variables)
        return str(templar.template(trust_as_template(text), escape_backslashes=False, overrides=OVERRIDES) or "")

    def render_each(
        self, src: str, source: str, renders: list[tuple[dict[str, Any], str]], task_vars: dict[str, Any], extra: dict[str, Any],
        loop_var: str, settled: bool,
    ) -> list[str]:
        """What render gives for each (instance, dest) of `renders`, `extra` and the instance (as `loop_var`) its
        variables, from one compile: Ansible compiles a template's text anew at each call, and a host of seven instances
        paid seven compiles of each template. The text is rendered once for all of them, each render in a scope of its
        own that names its instance and its template_destpath as a render of it alone does; jinja2 parses it there as it
        would alone (one trailing newline dropped), and each result gets the trailing newlines Ansible gives a template
        back (as many as its text ends with). Only where `settled` (`extra` holds every host variable the template reads
        but the instance: one templated in a render could read the instance, which a scope does not give it), the text
        is batchable and the ansible_managed it gets names no destination; otherwise, for a single render, or where
        the batch fails (its error would name the wrapper, not the template), each is rendered alone."""
        text = self._loader.get_text_file_contents(source)
        generated = template_vars(src, source, renders[0][1] if renders else None, task_vars)
        alone = [(dest, {**extra, loop_var: instance}) for instance, dest in renders]
        if (
            len(renders) < 2 or not settled or not loop_var.isidentifier() or not batchable(text, loop_var)
            or "template_destpath" in str(generated.get("ansible_managed", ""))
        ):  # fmt: skip
            return [self.render(src, source, dest, task_vars, variables) for dest, variables in alone]
        separator = f"<sglang-fleet-render-{uuid.uuid4().hex}>"
        scope = f"{{% with {loop_var} = _sglang_fleet_render[0], template_destpath = _sglang_fleet_render[1] +%}}"
        wrapper = (
            "{% for _sglang_fleet_render in _sglang_fleet_renders %}" + scope + TRAILING_NEWLINE.sub("", text)
            + "{% endwith %}" + separator + "{% endfor %}"
        )  # fmt: skip
        variables = {**task_vars, **extra, **generated, "_sglang_fleet_renders": [list(render) for render in renders]}
        try:
            rendered = self.rendered(source, wrapper, variables)
        except AnsibleError:
            rendered = ""
        pieces = rendered.split(separator)
        if len(pieces) != len(renders) + 1 or pieces[-1]:
            return [self.render(src, source, dest, task_vars, variables) for dest, variables in alone]
        return [with_trailing_newlines(piece, text) for piece in pieces[:-1]]

    def settled(self, sources: Iterable[str], task_vars: dict[str, Any], loop_var: str) -> tuple[dict[str, Any], bool]:
        """The variables the templates at `sources` read, templated once for all their renders (each render would
        template each anew: a setting that is a template, compiled again per instance and file), but the instance
        (`loop_var`), each template's own variables (template_path, ansible_managed, ...) and any whose value cannot be
        templated without them (templated in each render, as before); and whether those are all the host's variables
        they read but the instance (none is templated again in a render: render_each's condition)."""
        names: set[str] = set()
        per_render = {loop_var, "hostvars", "vars", *generated_names()}
        try:
            for source in sources:
                parsed = PARSER.parse(self._loader.get_text_file_contents(source))
                names |= {node.name for node in parsed.find_all(jinja2.nodes.Name) if node.ctx == "load"}
        except jinja2.TemplateSyntaxError:
            return {}, False
        # What each render names for itself stands in for here: a variable that reads any of it (even through
        # `default` or `is defined`) fails, and is templated in each render instead.
        own = {loop_var, *generated_names()} - ({"ansible_managed"} if "ansible_managed" in task_vars else set())
        templar = self._templar.copy_with_new_env(available_variables={**task_vars, **dict.fromkeys(own, PER_RENDER)})
        settled = {}
        for name in sorted(names - per_render):
            if name in task_vars:
                try:
                    settled[name] = templar.template(task_vars[name])
                except Exception:  # any failure only leaves it to each render, as before
                    continue
        return settled, {name for name in names - {loop_var} if name in task_vars} <= set(settled)

    def requests(self, given: Any, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The requests by name: `given` as it is, or, for a list of variable names, each variable's request (templated
        as Ansible would any variable) under its `name`."""
        if isinstance(given, dict):
            return dict(given)
        if not isinstance(given, list):
            raise AnsibleActionFail("requests: the requests by name, or a list of the variables' names that hold them")
        requests: dict[str, Any] = {}
        for variable in given:
            if not isinstance(variable, str) or variable not in task_vars:
                raise AnsibleActionFail(f"requests: {variable!r} is no variable of this host (a request's variable name)")
            request = self._templar.template(task_vars[variable])
            if not isinstance(request, dict) or not isinstance(request.get("name"), str):
                raise AnsibleActionFail(f"requests: {variable} is no request (a dict with its name)")
            requests[request["name"]] = request
        return requests

    def find(self, kind: str, src: str, role_path: str | None) -> str:
        """The file `src` of templates/ or files/: the given role's, or (without one) this task's role's."""
        if role_path is None:
            return str(self._find_needle(kind, src))
        source = os.path.join(role_path, kind, src)
        if not os.path.isfile(source):
            raise AnsibleActionFail(f"{src}: no such file in {os.path.join(role_path, kind)}")
        return source

    def collect(
        self, request: dict[str, Any], task_vars: dict[str, Any], private_contents: list[str]
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """One request's files, rendered ({path, owner, group, mode} with its content, or the index of a private one in
        `private_contents`), and the instance each instance file belongs to."""
        loop_var = str(request.get("loop_var", "sglang_server_instance"))
        role_path = request.get("role_path")
        files: list[dict[str, Any]] = []
        owner_of: dict[str, str] = {}

        def add(path: str, content: str, attributes: dict[str, Any], private: bool) -> None:
            """One file to write; a private one's content travels apart, never logged, never in a diff."""
            spec = {"path": path, **{key: attributes[key] for key in ("owner", "group", "mode")}}
            if private:
                spec["private"] = len(private_contents)
                private_contents.append(content)
            else:
                spec["content"] = content
            files.append(spec)

        given = request.get("templates") or []
        templates = [(template, self.find("templates", template["src"], role_path)) for template in given]
        instances = request.get("instances") or []
        sources = [source for template, source in templates]
        settled, whole = self.settled(sources, task_vars, loop_var) if instances else ({}, False)
        for template, source in templates:
            dests = [(instance, instance["files"][template["file"]]) for instance in instances]
            renders = [(instance, dest) for instance, dest in dests if dest]
            for (instance, dest), content in zip(
                renders, self.render_each(template["src"], source, renders, task_vars, settled, loop_var, whole), strict=True
            ):
                add(dest, content, template, bool(template.get("private")))
                owner_of[dest] = instance["name"]
        for single in request.get("files") or []:
            if "content" in single:
                content = str(single["content"])
            elif "module_utils" in single:  # one of this collection's module_utils, shipped as it is (standard library only)
                content = self._loader.get_text_file_contents(module_utils_file(str(single["module_utils"])))
            else:
                source = self.find("templates" if single.get("template") else "files", single["src"], role_path)
                content = (
                    self.render(single["src"], source, single["dest"], task_vars, dict(single.get("vars") or {}))
                    if single.get("template")
                    else self._loader.get_text_file_contents(source)
                )
            add(single["dest"], content, single, bool(single.get("private")))
        return files, owner_of

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        private_contents: list[str] = []
        try:
            requests = self.requests(args.get("requests") or {}, task_vars)
            files, owner_of = self.collect(dict(args), task_vars, private_contents)
            collected = {name: self.collect(dict(request), task_vars, private_contents) for name, request in requests.items()}
        except AnsibleActionFail as error:
            return {**result, "failed": True, "msg": str(error)}
        module_args: dict[str, Any] = {"files": files, "private_contents": private_contents}
        if args.get("read") is not None:
            module_args["read"] = args["read"]
        if requests:
            module_args["requests"] = {
                name: {"files": collected[name][0]}
                | ({"read": request["read"]} if request.get("read") is not None else {})
                | (
                    {"routers": [private_router(router, private_contents) for router in request["routers"]]}
                    if request.get("routers")
                    else {}
                )
                for name, request in requests.items()
            }
        module_result = self._execute_module(
            module_name="sglang.fleet.sglang_instance_files", module_args=module_args, task_vars=task_vars
        )
        result.update(module_result)
        result["changed_instances"] = changed_instances(module_result, owner_of)
        if self._task.check_mode:
            result["planned"] = planned(module_result, files, owner_of)
        for name, answer in (module_result.get("answers") or {}).items():
            answer["changed_instances"] = changed_instances(answer, collected[name][1])
            if not self._task.diff:
                answer.pop("diff", None)
        if requests and not module_result.get("failed"):
            decide(result, requests)
        if not self._task.diff:
            result.pop("diff", None)
        return result


def decide(result: dict[str, Any], requests: dict[str, Any]) -> None:
    """Each request's role decision (module_utils/role_decisions.py), from its `decide` settings and its answer, in its
    answer's `decision`; and `changes`, every role's changes in the requests' order: what deploy prints and ends on."""
    result["changes"] = []
    for name, request in requests.items():
        if request.get("decide") is None:
            continue
        answer = result.setdefault("answers", {}).setdefault(name, {})
        answer["decision"] = role_decisions.decide(name, request["decide"], answer)
        result["changes"] += answer["decision"]["changes"]


def changed_instances(answer: dict[str, Any], owner_of: dict[str, str]) -> list[str]:
    """The instances (by name) any of whose files the module found different."""
    return sorted({owner_of[path] for path in answer.get("changed_paths") or [] if path in owner_of})


def planned(answer: dict[str, Any], files: list[dict[str, Any]], owner_of: dict[str, str]) -> dict[str, str | None]:
    """In check mode, each instance file the module found different, with the content a real run writes (None for a
    private one: its content never leaves the action): sglang_rollout tells from them which instances it would update
    in place."""
    changed = set(answer.get("changed_paths") or [])
    return {spec["path"]: spec.get("content") for spec in files if spec["path"] in changed and spec["path"] in owner_of}


def private_router(router: dict[str, Any], private_contents: list[str]) -> dict[str, Any]:
    """A router to compare, its admin key moved to the private contents (never logged)."""
    private_contents.append(str(router.get("api_key") or ""))
    return {**router, "api_key": len(private_contents) - 1}


def with_trailing_newlines(rendered: str, text: str) -> str:
    """`rendered` with the newlines Ansible adds back to a rendered template: as many as `text` (the template's own
    text) ends with, less those it already ends with."""

    def trailing(value: str) -> int:
        return len(value) - len(value.rstrip("\n"))

    return rendered + "\n" * max(0, trailing(text) - trailing(rendered))


def batchable(text: str, loop_var: str) -> bool:
    """Whether render_each may render the template `text` once for all the instances: it parses, holds an expression
    or a tag (a text with none Ansible writes as it is) and literal text at its top level (without, Ansible gives the
    value of its one expression as it is, not a text with its trailing newlines), and only BATCHABLE nodes, calling
    only READING_METHODS, naming `loop` only inside a loop of its own (not in its filter), assigning neither `loop_var`
    nor template_destpath (which each render's scope binds) and naming nothing of the batch's own."""
    if text.startswith("#jinja2:"):
        return False
    try:
        tree = BATCH_PARSER.parse(text)
    except jinja2.TemplateSyntaxError:
        return False
    literal = any(isinstance(node, jinja2.nodes.TemplateData) and node.data for out in tree.body
                  if isinstance(out, jinja2.nodes.Output) for node in out.nodes)  # fmt: skip
    expression = any(not isinstance(node, (jinja2.nodes.Template, jinja2.nodes.Output, jinja2.nodes.TemplateData))
                     for node in tree.find_all(jinja2.nodes.Node))  # fmt: skip
    return literal and expression and allowed(tree, False, {loop_var, "template_destpath"})


def allowed(node: jinja2.nodes.Node, in_loop: bool, bound: set[str]) -> bool:
    """`node` and every node below it BATCHABLE (see batchable); `bound`, the names each render's scope binds."""
    if not isinstance(node, BATCHABLE):
        return False
    if isinstance(node, jinja2.nodes.Call) and not (
        isinstance(node.node, jinja2.nodes.Getattr) and node.node.attr in READING_METHODS
    ):
        return False
    if isinstance(node, jinja2.nodes.Name) and (
        node.name.startswith("_sglang_fleet_render")
        or (node.name == "loop" and not in_loop)
        or (node.ctx != "load" and node.name in bound)
    ):
        return False
    if isinstance(node, jinja2.nodes.For):
        outside = [node.target, node.iter, *([node.test] if node.test else []), *node.else_]
        inside = node.body
        return all(allowed(child, in_loop, bound) for child in outside) and all(allowed(child, True, bound) for child in inside)
    return all(allowed(child, in_loop, bound) for child in node.iter_child_nodes())
