"""Ansible callback: make the controller ready for the worker processes each task forks, as a preforking server does
(load once, then freeze)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: prefork
type: aggregate
short_description: Load plugins once in the controller and freeze its objects before each task forks
description:
  - Ansible forks a worker process per host and task, and each worker inherits the controller's memory as it is.
  - As the play starts, this loads the collection's filter, lookup and action plugins (and the shared code they import)
    in the controller. Otherwise every worker that uses one of them imports them again, and a worker that uses any of
    the collection's filters imports all of its filter files (how Ansible finds a collection's filter).
  - It also loads Ansible's own Jinja filters and tests (a worker that templates with any of them loads every one of
    them otherwise) and the connection plugins of the play's hosts (C(ansible_connection) among the host variables of
    the play's first 20 hosts, the play's C(connection), the configured default). Every worker loads its host's
    connection plugin, and reads its documentation for its settings, even for a task that never connects.
  - It templates one expression, so the controller builds Ansible's Jinja lexer (kept for the process, a dozen regular
    expressions compiled) before any worker forks. Otherwise every worker that templates builds it again (about 2 ms
    each on the sandbox).
  - At the start of each task and handler, before its workers fork, it moves the controller's objects into Python's
    permanent generation (C(gc.freeze())), the idiom Python's documentation gives for a process that forks without
    exec. Without it, most workers of a run make a full garbage collection of every object they inherited (about
    50 ms each on the sandbox). Frozen objects are still freed when their last reference goes; the controller's cyclic
    garbage older than a task is freed when the run ends.
  - Only public interfaces - C(importlib), Ansible's plugin loaders, variable manager and C(Templar), C(gc.freeze()).
    Where any of them is missing or fails, it warns and leaves that step to Ansible as without it.
  - Changes nothing a play does or prints. Opt-in - enable it in C(callbacks_enabled) (this checkout's C(ansible.cfg)
    does - on the sandbox, a no-op deploy took 4.6 s with it against 5.4 s without, 3.3 s of CPU against 4.3 s).
requirements:
  - enabled in callbacks_enabled
"""

import functools
import gc
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible import constants
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import connection_loader, filter_loader, test_loader
from ansible.utils.display import Display

display = Display()


PLUGINS = Path(__file__).resolve().parent.parent
PACKAGE = "ansible_collections.sglang.fleet.plugins"
# The hosts whose variables are read for their connection plugin: enough for the few connections an inventory uses,
# without reading every host's variables of a large one.
CONNECTION_HOSTS = 20


def attempt(what: str, step: Callable[[], Any], returns: bool = True) -> Any:
    """`step()`, or None with a warning where it fails or (`returns`) finds nothing: what it prepares is then left to
    the workers, as without this callback (a plugin that fails to load fails again, with its task)."""
    try:
        result = step()
    except Exception as error:
        display.warning(f"sglang.fleet.prefork: {what} not prepared: {error}")
        return None
    if returns and result is None:
        display.warning(f"sglang.fleet.prefork: {what} not prepared: not found")
    return result


def preload(folders: tuple[str, ...] = ("action", "filter", "lookup")) -> list[str]:
    """Import the collection's plugins of `folders` under the names Ansible's plugin loader gives them (it takes a
    module already in sys.modules as loaded); returns the names imported."""
    names = [f"{PACKAGE}.{folder}.{path.stem}" for folder in folders for path in sorted((PLUGINS / folder).glob("[!_]*.py"))]
    return [name for name in names if attempt(name, functools.partial(importlib.import_module, name)) is not None]


def connection_names(play: Any) -> set[str]:
    """The connection plugins the play's hosts use: the play's or the configured default, and those the host variables
    of its first CONNECTION_HOSTS hosts name (one given by a template is left to the workers)."""
    names = {play.connection or constants.DEFAULT_TRANSPORT}
    variables = play.get_variable_manager().get_vars(play=play)
    for host in variables["ansible_play_hosts_all"][:CONNECTION_HOSTS]:
        names.add(variables["hostvars"].raw_get(host).get("ansible_connection"))
    return {name for name in names if isinstance(name, str) and "{" not in name}


def load_ansible_plugins(connections: set[str]) -> None:
    """Ansible's own Jinja filters and tests (asking for one loads them all) and the connection plugins `connections`,
    as the plugin loader keeps them."""
    attempt("ansible.builtin.to_json", functools.partial(filter_loader.get, "ansible.builtin.to_json"))
    attempt("ansible.builtin.version", functools.partial(test_loader.get, "ansible.builtin.version"))
    for connection in sorted(connections):
        attempt(connection, functools.partial(connection_loader.get, connection, class_only=True))


def build_lexer() -> Any:
    """Template one expression as a worker templates a task's: the Jinja lexer Ansible builds for it (for the default
    template settings) is kept for the process, and every worker forked after inherits it."""
    from ansible.template import Templar, trust_as_template

    return Templar().template(trust_as_template("{{ 0 }}"))


def freeze() -> None:
    """Move the controller's objects to Python's permanent generation before a task's workers fork."""
    # gc.freeze looked up when called: where it is missing, attempt warns (a lambda, not the attribute itself).
    attempt("gc.freeze", lambda: gc.freeze(), returns=False)  # pylint: disable=unnecessary-lambda


class CallbackModule(CallbackBase):  # type: ignore[misc]
    """Ansible entry point."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang.fleet.prefork"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play: Any) -> None:
        preload()
        load_ansible_plugins(attempt("the play's connection plugins", functools.partial(connection_names, play)) or set())
        attempt("Ansible's Jinja lexer", build_lexer)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        freeze()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        freeze()
