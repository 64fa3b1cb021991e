"""The callback sglang.fleet.prefork: the plugins it loads in the controller are the ones Ansible's plugin loader then
uses (no worker imports them again), and a task's start freezes the controller's objects before its workers fork."""

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
