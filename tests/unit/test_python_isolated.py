"""Python that a task runs on a host with `python3 -c <code>` (as root, or holding the API key) runs isolated (-I):
`-c` puts the working directory first on sys.path, so a module there named like one the code imports (socket, json)
would run in its place; -I leaves it out, and PYTHON* variables too."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import ROOT


def commands(data: Any) -> Iterator[list[str]]:
    """Every ansible.builtin.command argv of a loaded playbook or task file, nested blocks and plays included."""
    if isinstance(data, dict):
        argv = (
            (data.get("ansible.builtin.command") or {}).get("argv")
            if isinstance(data.get("ansible.builtin.command"), dict)
            else None
        )
        if isinstance(argv, list):
            yield [str(item) for item in argv]
        for value in data.values():
            yield from commands(value)
    elif isinstance(data, list):
        for item in data:
            yield from commands(item)


def python_c_prefixes() -> list[tuple[str, list[str]]]:
    """(file, the argv up to and including -c) of every `python3 ... -c <code>` command of the roles and playbooks."""
    found = []
    for path in sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")]):
        for argv in commands(yaml.safe_load(path.read_text())):
            if argv and "python" in argv[0] and "-c" in argv:
                found.append((str(path.relative_to(ROOT)), argv[: argv.index("-c") + 1]))
    return found


def test_the_commands_are_found() -> None:
    files = {name for name, _ in python_c_prefixes()}
    assert {"roles/sglang_plan/tasks/nodes.yml", "playbooks/bench.yml"} <= files


@pytest.mark.parametrize(("name", "prefix"), python_c_prefixes(), ids=lambda value: str(value))
def test_no_module_of_the_working_directory_runs(name: str, prefix: list[str], tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "socket.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    argv = [sys.executable, *prefix[1:], "import socket"]
    subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True, timeout=30)
    assert not marker.exists(), f"{name}: {' '.join(prefix)} imported the working directory's socket.py"
