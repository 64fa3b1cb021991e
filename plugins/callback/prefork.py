"""Ansible callback: make the controller ready for the worker processes each task forks, as a preforking server does
(load once, then freeze)."""

from __future__ import annotations

import functools
import gc
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible import constants
from ansible.inventory.helpers import get_group_vars
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import connection_loader, filter_loader, test_loader
from ansible.utils.display import Display
from ansible.utils.vars import combine_vars

display = Display()

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
    them otherwise) and the connection plugins of the play's hosts, as the inventory names them (C(ansible_connection)
    of a host or its groups, the play's C(connection), the configured default). Every worker loads its host's
    connection plugin, and reads its documentation for its settings, even for a task that never connects.
  - At the start of each task and handler, before its workers fork, it moves the controller's objects into Python's
    permanent generation (C(gc.freeze())), the idiom Python's documentation gives for a process that forks without
    exec. Without it, most workers of a run make a full garbage collection of every object they inherited (about
    50 ms each on the sandbox). Frozen objects are still freed when their last reference goes; the controller's cyclic
    garbage older than a task is freed when the run ends.
  - Changes nothing a play does or prints. Enable it in C(callbacks_enabled) (this checkout's C(ansible.cfg) does).
requirements:
  - enabled in callbacks_enabled
"""

PLUGINS = Path(__file__).resolve().parent.parent
PACKAGE = "ansible_collections.sglang.fleet.plugins"


def loaded(name: str, load: Callable[[], object]) -> bool:
    """Whether `load` succeeded; a failure is the worker's to report, with its task (here only logged at -vvv)."""
    try:
        load()
    except Exception as error:
        display.vvv(f"sglang.fleet.prefork: not preloaded: {name}: {error}")
        return False
    return True


def preload(folders: tuple[str, ...] = ("action", "filter", "lookup")) -> list[str]:
    """Import the collection's plugins of `folders` under the names Ansible's plugin loader gives them (it takes a
    module already in sys.modules as loaded); returns the names imported. One that fails is left for its worker to
    report when a task uses it."""
    names = [f"{PACKAGE}.{folder}.{path.stem}" for folder in folders for path in sorted((PLUGINS / folder).glob("[!_]*.py"))]
    return [name for name in names if loaded(name, functools.partial(importlib.import_module, name))]


def connection_names(play: Any) -> set[str]:
    """The connection plugins the play's hosts use, where the play or the inventory's host and group variables name
    them (one named only in a group_vars folder or a template is left to the workers)."""
    names = {play.connection or constants.DEFAULT_TRANSPORT}
    inventory = getattr(play.get_variable_manager(), "_inventory", None)
    if inventory is not None:
        for host in inventory.get_hosts(play.hosts):
            variables = combine_vars(get_group_vars(host.get_groups()), host.get_vars())
            names.add(variables.get("ansible_connection"))
    return {name for name in names if isinstance(name, str) and "{" not in name}


def load_ansible_plugins(connections: set[str]) -> None:
    """Ansible's own Jinja filters and tests (asking for one loads them all) and the connection plugins `connections`,
    as the plugin loader keeps them. One that fails is left for its worker to report."""
    loaded("ansible.builtin.to_json", functools.partial(filter_loader.get, "ansible.builtin.to_json"))
    loaded("ansible.builtin.version", functools.partial(test_loader.get, "ansible.builtin.version"))
    for connection in sorted(connections):
        loaded(connection, functools.partial(connection_loader.get, connection, class_only=True))


class CallbackModule(CallbackBase):  # type: ignore[misc]
    """Ansible entry point."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang.fleet.prefork"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play: Any) -> None:
        preload()
        load_ansible_plugins(connection_names(play))

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        gc.freeze()
