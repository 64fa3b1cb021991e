"""The deploy through the execution environment (execution-environment.yml, `make ee`), as AWX / Automation Platform
runs it: the image holds the control node's versions, and ansible-navigator's sandbox deploy through it changes nothing.

The image is built by scripts/ee-image.sh, found by the hash of its inputs when nothing changed (seconds), rebuilt
otherwise (minutes)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from fleet import ROOT, SANDBOX_HOSTS, Run

# A host's line of the play recap.
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


@pytest.fixture(scope="module")
def ee_image() -> str:
    built = subprocess.run([str(ROOT / "scripts/ee-image.sh")], capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-4000:]
    return built.stdout.split()[-1]


def in_image(image: str, *command: str) -> str:
    return subprocess.run(["docker", "run", "--rm", image, *command], capture_output=True, text=True, check=True).stdout


def pins(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line, names as pip normalizes them."""
    found = {}
    for line in text.splitlines():
        name, separator, version = line.partition("==")
        if separator and not line.startswith("#"):
            found[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return found


def test_the_image_holds_the_control_nodes_versions(ee_image: str) -> None:
    listed = json.loads(in_image(ee_image, "ansible-galaxy", "collection", "list", "--format", "json"))
    collections = {name: info["version"] for path in listed.values() for name, info in path.items()}
    required = yaml.safe_load((ROOT / "requirements/collections.yml").read_text())["collections"]
    wanted = {item["name"]: str(item["version"]) for item in required}
    assert {name: collections.get(name) for name in wanted} == wanted
    assert collections.get("sglang.fleet") == yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]

    control = pins((ROOT / "requirements/control.txt").read_text())
    image = pins(in_image(ee_image, "python3", "-m", "pip", "freeze"))
    assert {"ansible-core", "ansible-runner", "requests"} <= image.keys()
    pinned = sorted(name for name in image if name in control)
    assert [(name, image[name]) for name in pinned] == [(name, control[name]) for name in pinned]


def test_a_sandbox_deploy_through_the_image_changes_nothing(sandbox: Run, ee_image: str, tmp_path: Path) -> None:
    """`ansible-navigator run deploy.yml` in the image, on the deployed sandbox: succeeds and changes nothing.

    Mounted into the container: the docker socket (ee/sandbox.yml reaches the test hosts through its API), and the
    control node's state under ~/.cache/sglang-fleet (the router admin keys the roles generate once, the wheelhouse),
    at the same path: the container runs as this user (ansible-runner passes --user), root here, whose home it shares.
    """
    cache = Path.home() / ".cache/sglang-fleet"
    cache.mkdir(parents=True, exist_ok=True)
    command = [
        "ansible-navigator", "run", "deploy.yml", "-i", "inventory/sandbox", "-i", "ee/sandbox.yml",
        "--ee", "true", "--eei", ee_image, "--pull-policy", "never", "--container-engine", "docker", "--mode", "stdout",
        "--eev", "/var/run/docker.sock:/var/run/docker.sock", "--eev", f"{cache}:{cache}",
        "--pae", "false", "--lf", str(tmp_path / "ansible-navigator.log"),
    ]  # fmt: skip
    ran = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, errors="replace", timeout=900)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    recap = {host: (changed, unreachable, failed) for host, changed, unreachable, failed in RECAP.findall(ran.stdout)}
    assert recap == {host: ("0", "0", "0") for host in SANDBOX_HOSTS}, ran.stdout[-4000:]
