"""A test host of any shape joins the sandbox as one file of its own (README, "A test host of your own"), kept apart
from production's settings, and playbooks/sandbox.yml names what a host lacks before any container starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import testhost
from fleet import ROOT, SANDBOX_INVENTORY

H100X2 = """
sglang_servers:
  hosts:
    h100x2:
      sandbox_machine:
        gpus: {count: 2, name: NVIDIA H100 80GB HBM3, memory_mib: 81559}
"""


def test_a_host_without_a_whole_stand_in_machine_is_named_with_what_it_lacks() -> None:
    machines = {"ct129": {"gpus": {"count": 2, "name": "A", "memory_mib": 1}}, "new": {"gpus": {"count": 2}}, "bare": {}}
    problems = testhost.testhost_machine_problems(["ct129", "new", "bare"], machines)
    assert [line.split(";")[0] for line in problems] == [
        "new host: sandbox_machine.gpus lacks name, memory_mib",
        "bare host: sandbox_machine.gpus lacks count, name, memory_mib",
    ]
    assert all("fix: set sandbox_machine" in line for line in problems)


def test_the_sandbox_host_vars_are_links_to_production_own_hosts_only() -> None:
    folder = SANDBOX_INVENTORY / "host_vars"
    assert not folder.is_symlink()
    links = {path.name: os.readlink(path) for path in folder.iterdir()}
    assert links == {name: f"../../production/host_vars/{name}" for name in ("ct129.yml", "b200.yml")}


def inventory_of(directory: Path, extra: str) -> dict[str, object]:
    target = directory / "inventory"
    shutil.copytree(SANDBOX_INVENTORY, target, symlinks=True)
    (target / "h100x2.yml").write_text(extra)
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(target), "--list"],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )  # fmt: skip
    found: dict[str, object] = json.loads(listed.stdout)
    return found


def test_one_file_adds_a_host_that_serves_the_mirror_model_with_its_own_machine(tmp_path: Path) -> None:
    found = inventory_of(tmp_path, H100X2)
    hostvars = found["_meta"]["hostvars"]  # type: ignore[index]
    assert hostvars["h100x2"]["sandbox_machine"]["gpus"]["count"] == 2
    assert hostvars["h100x2"]["ansible_connection"] == "community.docker.docker"
    assert "h100x2" in found["sglang_servers"]["hosts"]  # type: ignore[index]
    assert found["mirror_model"]["children"] == ["sglang_servers"]  # type: ignore[index]
    assert not (ROOT / "inventory/production/host_vars/h100x2.yml").exists()


def test_the_sandbox_refuses_a_host_without_a_machine_before_any_container(tmp_path: Path) -> None:
    inventory_of(tmp_path, H100X2.replace("sandbox_machine", "other_setting"))
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory"),
         "playbooks/sandbox.yml", "--limit", "h100x2,localhost"],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )  # fmt: skip
    assert ran.returncode == 2
    assert "h100x2 host: sandbox_machine.gpus lacks count, name, memory_mib" in ran.stdout
    assert "Build the test-host image" not in ran.stdout, "refused before any container task"
