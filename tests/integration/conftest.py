"""The sandbox test hosts (ct129, b200), started and deployed once per session."""

from __future__ import annotations

import os
import subprocess

import pytest
from fleet import ROOT, Run, run_playbook
from mirror import start_mirror


@pytest.fixture(scope="session")
def sandbox() -> Run:
    """Test hosts up and the production settings deployed to them, their model from the mirror (what `make sandbox`
    does)."""
    subprocess.run([str(ROOT / "scripts/docker-engine.sh")], check=True)
    start_mirror()
    hosts = run_playbook("playbooks/sandbox.yml")
    assert hosts.rc == 0, hosts.failure_messages()
    deployed = run_playbook("deploy.yml")
    assert deployed.rc == 0, deployed.failure_messages()
    return deployed


@pytest.fixture(scope="session", autouse=True)
def _ansible_on_path() -> None:
    os.environ["PATH"] = f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"
