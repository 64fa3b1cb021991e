"""Ansible callback: make the controller ready for the worker processes each task forks, as a preforking server does
(load once, then freeze), and keep the templates they compile for each other and for the next runs."""

from __future__ import annotations

DOCUMENTATION = r"""
name: prefork
type: aggregate
short_description: Load plugins once in the controller, freeze its objects before each task forks, keep what workers compile
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
  - Ansible compiles every template it meets and keeps none; on the sandbox a no-op deploy compiled about a thousand,
    a quarter of them distinct, for about a third of its workers' CPU. With O(cache), Jinja's code for a template is
    kept on the control node's disk (under O(cache_dir)) for the run's other workers and for later runs. An entry is
    keyed by the template's text, the environment's syntax settings and the versions of Ansible, Jinja and Python, and
    is used only while every filter and test the template names is still called as when it was compiled. Entries no
    run read for 30 days are removed as a run ends. The folder must be this user's alone (it is created so); a vaulted
    template or value is never kept.
  - Once a run, Ansible builds the payload of each module the play calls, and parses for it the module and every
    module_utils file it imports (on the sandbox, 135 files for the plan's facts module, a quarter of a second before
    the first host's call). With O(cache), what each file imports is kept too, by the file's text (sha256) and the
    versions of Ansible and Python. Where each import is found, which files are read and what the payload holds are
    Ansible's own work on every run; a file is parsed only when its text is new (or its parse warns).
  - Ansible's collection loader compiles each of a collection's Python files from its text every time a run imports
    it, and keeps no bytecode (about 40 ms of every run on the sandbox, before its first task). With O(cache), the code
    is kept too, by the file's name and text (sha256) and the versions of Ansible and Python; a file is read on every
    import as before, and compiled only when its text is new (or its compile warns).
  - Changes nothing a play does or prints. Enable it in C(callbacks_enabled) (this checkout's C(ansible.cfg) does).
requirements:
  - enabled in callbacks_enabled
options:
  cache:
    description:
      - Keep Jinja's compiled templates, what each module_utils file imports and the code of the collections' Python
        files on the control node's disk.
    type: bool
    default: true
    env: [{name: SGLANG_FLEET_CACHE}]
    ini: [{section: sglang_fleet, key: cache}]
  cache_dir:
    description:
      - Where (its folders C(templates), C(imports) and C(code)); empty is C(sglang.fleet) under Ansible's home
        (C(ANSIBLE_HOME)).
    type: str
    default: ''
    env: [{name: SGLANG_FLEET_CACHE_DIR}]
    ini: [{section: sglang_fleet, key: cache_dir}]
"""

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
from ansible_collections.sglang.fleet.plugins.plugin_utils import code_cache, disk_cache, import_cache, template_cache

display = Display()


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.installed: Path | None = None  # the cache folder in use, once a play started

    def cache_dir(self) -> Path | None:
        if not self.get_option("cache"):
            return None
        folder = self.get_option("cache_dir")
        return Path(folder).expanduser() if folder else Path(constants.ANSIBLE_HOME, "sglang.fleet")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        if (folder := self.cache_dir()) is not None:
            if disk_cache.private(folder):
                code_cache.install(folder / "code")
                template_cache.install(folder / "templates")
                import_cache.install(folder / "imports")
                self.installed = folder
            else:
                display.warning(
                    f"sglang.fleet.prefork: nothing kept, all compiled and parsed anew: {folder} is not this user's alone"
                )
        preload()
        load_ansible_plugins(connection_names(play))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if self.installed is not None:
            code_cache.prune(self.installed / "code")
            template_cache.prune(self.installed / "templates")
            import_cache.prune(self.installed / "imports")

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        gc.freeze()
