"""The callback sglang.fleet.prefork: the plugins it loads in the controller are the ones Ansible's plugin loader then
uses (no worker imports them again), Ansible's own Jinja plugins and the play's connection plugins are loaded as a worker
asks for them, and a task's start freezes the controller's objects before its workers fork."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.sglang.fleet.plugins.callback.prefork import CallbackModule
from fleet import ROOT

# In a fresh interpreter: the collection finder as ansible-playbook installs it, then preload, then the loader asked for
# one plugin of each kind, as a worker asks. A marker set on each preloaded module tells whether the loader took it.
LOADER_TAKES_THE_PRELOADED_MODULES = """
import json, sys
from ansible.plugins.loader import action_loader, filter_loader, init_plugin_loader, lookup_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.sglang.fleet.plugins.callback.prefork import preload
names = preload()
for name in names:
    sys.modules[name].preloaded_here = True
action = action_loader.get("sglang.fleet.sglang_instance_files", class_only=True)
lookup = lookup_loader.get("sglang.fleet.sglang_free_space", class_only=True)
jinja_filter = filter_loader.get("sglang.fleet.sglang_plan")
print(json.dumps({
    "names": names,
    "taken": [getattr(sys.modules[action.__module__], "preloaded_here", False),
              getattr(sys.modules[lookup.__module__], "preloaded_here", False),
              getattr(sys.modules[jinja_filter.j2_function.__module__], "preloaded_here", False)],
}))
"""


def test_the_loader_uses_the_plugins_preloaded_for_every_kind() -> None:
    run = subprocess.run(
        [sys.executable, "-c", LOADER_TAKES_THE_PRELOADED_MODULES, str(ROOT / "collections")],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    expected = {
        f"ansible_collections.sglang.fleet.plugins.{kind}.{path.stem}"
        for kind in ("action", "filter", "lookup")
        for path in (ROOT / "plugins" / kind).glob("[!_]*.py")
    }
    assert set(answer["names"]) == expected
    assert answer["taken"] == [True, True, True]


def test_a_plugin_that_fails_to_import_is_left_to_its_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.sglang.fleet.plugins.callback import prefork

    (tmp_path / "filter").mkdir()
    (tmp_path / "filter" / "broken_for_this_test.py").write_text("raise RuntimeError('broken')\n")
    (tmp_path / "filter" / "_private.py").write_text("raise RuntimeError('never imported')\n")
    monkeypatch.setattr(prefork, "PLUGINS", tmp_path)
    assert prefork.preload(("filter",)) == []


# In a fresh interpreter, as a worker asks: a filter and a test of Ansible's own (each asks for all of them) and the
# sandbox's connection plugin; with or without load_ansible_plugins first. What the asking imports and which plugin
# settings it reads from the connection plugin's documentation (both inherited by a worker forked after the preload).
WORKER_ASKS_FOR_ANSIBLE_PLUGINS = """
import json, sys
from ansible import constants
from ansible.plugins.loader import connection_loader, filter_loader, init_plugin_loader, test_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.sglang.fleet.plugins.callback.prefork import load_ansible_plugins
if sys.argv[2] == "preloaded":
    load_ansible_plugins({"community.docker.docker"})
modules = set(sys.modules)
documented = constants.config.has_configuration_definition(
    "connection", "ansible_collections.community.docker.plugins.connection.docker")
assert filter_loader.get("ansible.builtin.to_yaml") is not None
assert test_loader.get("ansible.builtin.version") is not None
assert connection_loader.get("community.docker.docker", class_only=True) is not None
print(json.dumps({"imported": sorted(set(sys.modules) - modules), "documented": documented}))
"""


@pytest.mark.parametrize("preloaded", [True, False])
def test_ansible_filters_tests_and_connection_are_loaded_before_a_worker_asks(preloaded: bool) -> None:
    run = subprocess.run(
        [sys.executable, "-c", WORKER_ASKS_FOR_ANSIBLE_PLUGINS, str(ROOT / "collections"), "preloaded" if preloaded else "-"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    if preloaded:
        assert answer == {"imported": [], "documented": True}
    else:  # what a worker did by itself
        assert any(name.startswith("ansible.plugins.filter.core_") for name in answer["imported"])
        assert any(name.startswith("ansible.plugins.test.core_") for name in answer["imported"])
        assert "ansible_collections.community.docker.plugins.connection.docker" in answer["imported"]
        assert answer["documented"] is False


# In a fresh interpreter, as a worker templates a task's argument: how many Jinja lexers it builds (jinja2's Lexer, public),
# with or without the callback's play start first (what a worker forked after it inherits).
WORKER_TEMPLATES = """
import sys
import jinja2.lexer
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader([sys.argv[2]])
from types import SimpleNamespace
from ansible_collections.sglang.fleet.plugins.callback.prefork import CallbackModule
if sys.argv[1] == "built":  # as the play starts (a play without hosts' variables: its connections are only warned of)
    CallbackModule().v2_playbook_on_play_start(SimpleNamespace(connection="local", get_variable_manager=lambda: None))
built = []
made = jinja2.lexer.Lexer.__init__
def counted(self, *args, **kwargs):
    built.append(type(self).__name__)
    made(self, *args, **kwargs)
jinja2.lexer.Lexer.__init__ = counted
assert Templar(variables={"name": "b200"}).template(trust_as_template("{{ name | upper }}")) == "B200"
print(len(built))
"""


@pytest.mark.parametrize("built", [True, False])
def test_a_worker_templates_with_the_lexer_the_controller_built(built: bool) -> None:
    run = subprocess.run(
        [sys.executable, "-c", WORKER_TEMPLATES, "built" if built else "-", str(ROOT / "collections")],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == (0 if built else 1)


def test_the_play_s_connections_are_those_its_hosts_and_the_play_name(tmp_path: Path) -> None:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager
    from ansible_collections.sglang.fleet.plugins.callback.prefork import connection_names

    (tmp_path / "hosts.yml").write_text(
        "servers:\n"
        "  vars: {ansible_connection: community.docker.docker}\n"
        "  hosts:\n"
        "    a: {}\n"
        "    b: {ansible_connection: local}\n"
        '    c: {ansible_connection: \'{{ lookup("env", "CONNECTION") }}\'}\n'
        "others:\n"
        "  hosts: {d: {ansible_connection: paramiko}}\n"
    )
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    HostVars(inventory=inventory, variable_manager=manager, loader=loader)  # as Ansible's task queue makes them
    play = Play.load({"hosts": "servers", "tasks": []}, variable_manager=manager, loader=loader)
    assert connection_names(play) == {"ssh", "community.docker.docker", "local"}
    play = Play.load({"hosts": "others", "connection": "local", "tasks": []}, variable_manager=manager, loader=loader)
    assert connection_names(play) == {"local", "paramiko"}


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_a_task_or_handler_start_freezes_the_objects_its_workers_inherit() -> None:
    callback = CallbackModule()
    assert gc.get_freeze_count() == 0
    callback.v2_playbook_on_task_start(None, False)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    made_after: list[list[int]] = [[] for _ in range(1000)]
    callback.v2_playbook_on_handler_task_start(None)
    assert gc.get_freeze_count() >= frozen + len(made_after)


def test_anything_missing_is_a_warning_and_the_step_is_left_to_ansible(monkeypatch: pytest.MonkeyPatch) -> None:
    """A play without the variable manager it expects, a connection plugin that does not exist, no gc.freeze: each
    only warns, and the play goes on as without the callback."""
    from types import SimpleNamespace

    from ansible_collections.sglang.fleet.plugins.callback import prefork

    warned: list[str] = []
    monkeypatch.setattr(prefork.display, "warning", warned.append)
    monkeypatch.setattr(prefork, "preload", lambda: [])
    play = SimpleNamespace(connection="no.such.connection", get_variable_manager=lambda: None)
    CallbackModule().v2_playbook_on_play_start(play)
    assert len(warned) == 1 and warned[0].startswith("sglang.fleet.prefork: the play's connection plugins not prepared")
    prefork.load_ansible_plugins({"sglang.fleet.no_such_connection"})
    assert warned[1:] == ["sglang.fleet.prefork: sglang.fleet.no_such_connection not prepared: not found"]
    monkeypatch.delattr(gc, "freeze")
    CallbackModule().v2_playbook_on_task_start(None, False)
    assert warned[2].startswith("sglang.fleet.prefork: gc.freeze not prepared:"), warned
