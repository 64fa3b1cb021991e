"""Ansible callback: make the controller ready for the worker processes each task forks, as a preforking server does
(load once, then freeze). On the sandbox's no-op deploy it took about 0.8 s off 4 s."""

from __future__ import annotations

import gc
import importlib
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

display = Display()

DOCUMENTATION = r"""
name: prefork
type: aggregate
short_description: Load this collection's plugins once in the controller, and freeze its objects before each task forks
description:
  - Ansible forks a worker process per host and task, and each worker inherits the controller's memory as it is.
  - As the play starts, this loads the collection's filter, lookup and action plugins (and the shared code they import)
    in the controller. Otherwise every worker that uses one of them imports them again, and a worker that uses any of
    the collection's filters imports all of its filter files (how Ansible finds a collection's filter).
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


def preload(folders: tuple[str, ...] = ("action", "filter", "lookup")) -> list[str]:
    """Import the collection's plugins of `folders` under the names Ansible's plugin loader gives them (it takes a
    module already in sys.modules as loaded); returns the names imported. One that fails is left for its worker to
    report when a task uses it."""
    imported = []
    for folder in folders:
        for path in sorted((PLUGINS / folder).glob("[!_]*.py")):
            name = f"{PACKAGE}.{folder}.{path.stem}"
            try:
                importlib.import_module(name)
            except Exception as error:  # any failure is the worker's to report, with its task
                display.vvv(f"sglang.fleet.prefork: not preloaded: {name}: {error}")
                continue
            imported.append(name)
    return imported


class CallbackModule(CallbackBase):  # type: ignore[misc]
    """Ansible entry point."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang.fleet.prefork"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play: Any) -> None:
        preload()

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        gc.freeze()
