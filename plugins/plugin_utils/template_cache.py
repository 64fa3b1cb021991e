"""Jinja's compiled templates kept on the control node's disk, for the worker processes of a run and for the next runs.

Ansible compiles a template each time it meets one (parse, generate Python, compile it) and keeps nothing: every worker
of a run compiles again the same role variables, and every run compiles again the same playbook. The code Jinja makes
of a template depends on the template's text, the environment's syntax settings, Ansible's and Jinja's versions and,
for each filter and test it names, whether that exists and what it is passed (context, environment). All of them are
part of the key or checked as an entry is read; anything else (a debugger asking for the generated source, a template
already parsed, as a conditional is) is compiled as before.
"""

from __future__ import annotations

import functools
import marshal
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2
from ansible._internal._datatag._tags import SourceWasEncrypted, VaultedValue
from ansible._internal._templating._jinja_bits import (
    _TEMPLATE_OVERRIDE_FIELD_NAMES,
    AnsibleEnvironment,
    _TemplateCompileContext,
)
from ansible._internal._templating._jinja_common import _TemplateConfig
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache
from jinja2 import nodes
from jinja2.utils import _PassArg

FORMAT = 1

Dependency = tuple[str, str, "str | None"]  # ("filter" | "test", name, how Jinja passes it: None, or absent as "-")


def folder_for(base: Path) -> Path:
    """The folder of this Ansible, Jinja and Python under `base` (a code object is only valid for them)."""
    return disk_cache.versioned(base, "jinja2", jinja2.__version__, format_=FORMAT)


def settings(environment: jinja2.Environment) -> tuple[Any, ...]:
    """What of the environment and of Ansible's configuration the generated code depends on, besides the text."""
    escape = _TemplateCompileContext.current(optional=True)
    return (
        tuple(getattr(environment, name) for name in _TEMPLATE_OVERRIDE_FIELD_NAMES),
        environment.optimized,
        environment.is_async,
        bool(environment.autoescape),
        tuple(sorted(environment.extensions)),
        _TemplateConfig.allow_embedded_templates,
        escape.escape_backslashes if escape else None,
    )


def key(source: str, name: str | None, filename: str | None, defer_init: bool, environment: jinja2.Environment) -> str:
    return disk_cache.key((name, filename, defer_init, settings(environment)), source)


def passed(function: Callable[..., Any] | None) -> str | None:
    """How Jinja's generated code calls `function` (a filter or test): "-" when there is none."""
    if function is None:
        return "-"
    how = _PassArg.from_obj(function)
    return how.name if how else None


def called(environment: jinja2.Environment, kind: str, name: str) -> str | None:
    """How Jinja's generated code calls the filter or test `name` of `environment` now (see `passed`)."""
    plugins: Any = environment.filters if kind == "filter" else environment.tests
    return passed(plugins.get(name))


def dependencies(tree: nodes.Template, environment: jinja2.Environment) -> tuple[Dependency, ...]:
    """Every filter and test `tree` names, with how Jinja's generated code calls it now."""
    named = {("filter", node.name) for node in tree.find_all(nodes.Filter)}
    named |= {("test", node.name) for node in tree.find_all(nodes.Test)}
    return tuple(sorted((kind, name, called(environment, kind, name)) for kind, name in named))


def unchanged(recorded: Iterable[Dependency], environment: jinja2.Environment) -> bool:
    return all(called(environment, kind, name) == how for kind, name, how in recorded)


def read(path: Path, environment: jinja2.Environment) -> CodeType | None:
    """The entry at `path` when it exists, is whole and its filters and tests are still called as it was made for."""
    try:
        with path.open("rb") as entry:
            recorded, code = marshal.load(entry)
            if not isinstance(code, CodeType) or not unchanged(recorded, environment):
                return None
            disk_cache.refresh(entry)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return code


def cacheable(source: object, environment: Any) -> bool:
    """Not a parsed tree, not for a debugger, not a secret (a vaulted file or value: its text would be in the entry),
    not with Jinja extensions (their code is no part of the key), not compile-time autoescape (it calls a filter)."""
    return (
        isinstance(source, str)
        and not getattr(environment, "_debuggable_template_source", False)
        and not SourceWasEncrypted.is_tagged_on(source)
        and not VaultedValue.is_tagged_on(source)
        and not environment.extensions
        and "autoescape" not in source
    )


def caching(compile_template: Callable[..., Any], folder: Path) -> Callable[..., Any]:
    """`compile_template` (Jinja's Environment.compile) with the code of a template text read from `folder` when there,
    written there when not."""

    @functools.wraps(compile_template)
    def compile_cached(
        self: Any, source: Any, name: str | None = None, filename: str | None = None, raw: bool = False,
        defer_init: bool = False,
    ) -> Any:  # fmt: skip
        if raw or not cacheable(source, self):
            return compile_template(self, source, name, filename, raw, defer_init)
        path = folder / key(source, name, filename, defer_init, self)
        code = read(path, self)
        if code is None:
            code = compile_template(self, source, name, filename, raw, defer_init)
            try:
                recorded = dependencies(self._parse(source, name, filename), self)
            except Exception:  # a filter the compile never asked for fails to load: only not kept
                return code
            disk_cache.write(path, marshal.dumps((recorded, code)))
        return code

    return compile_cached


def install(base: Path) -> Path:
    """Make every AnsibleEnvironment of this process, and of the processes it forks, compile through the cache under
    `base`; returns the folder used. Installing again changes only the folder."""
    folder = folder_for(base)
    disk_cache.replace(AnsibleEnvironment, "compile", lambda compile_template: caching(compile_template, folder))
    return folder


def uninstall() -> None:
    disk_cache.restore(AnsibleEnvironment, "compile")


def prune(base: Path, now: float | None = None) -> int:
    """Remove the entries no run read for a month, and the folders of other versions (disk_cache.prune)."""
    return disk_cache.prune(base, folder_for(base), now)
