"""A new user's first hour (issue 44): a third test host of its own shape joins the sandbox as one file, is previewed
with --check --diff, deployed, listed by status with its router, deployed again as a no-op, and removed with its keys.

Runs apart from ct129 and b200 (every run is limited to the new host): it needs the Docker engine and the test mirror,
not the deployed sandbox. The host is small, for a control node of 2 cores: two stand-in GPUs, an instance on each
(NGRAM, no draft model), a router.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import ROOT, Run, on_host, overlay_inventory, run_playbook
from mirror import start_mirror

HOST = "h100x2"
HOST_FILE = f"""
sglang_servers:
  hosts:
    {HOST}:
      sandbox_machine:
        gpus: {{count: 2, name: NVIDIA H100 80GB HBM3, memory_mib: 81559}}
      sglang_gpus_per_instance: 1
      sglang_port_base: 30000
      sglang_speculative: {{algorithm: NGRAM}}
      sglang_router_enabled: true
      sglang_router_port: 30100
"""
KEYS = Path.home() / ".cache/sglang-fleet/router-admin-keys"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sandbox's inventory with the new host's one file beside hosts.yml, as the README says; its container is
    removed afterwards."""
    subprocess.run([str(ROOT / "scripts/docker-engine.sh")], check=True)
    start_mirror()
    target = overlay_inventory(tmp_path_factory.mktemp("new-host"))
    (target / f"{HOST}.yml").write_text(HOST_FILE)
    try:
        yield target
    finally:
        subprocess.run(["docker", "rm", "--force", "--volumes", HOST], capture_output=True, check=False)


def deploy(inventory: Path, cmdline: str | None = None) -> Run:
    return run_playbook("deploy.yml", inventory=inventory, limit=HOST, cmdline=cmdline)


def said(run: Run) -> str:
    return next(str(data["res"]["msg"]) for data in run.results() if data["task"] == "Say what this deploy changes on each host")


def test_a_third_host_from_preview_to_removal(inventory: Path) -> None:
    started = run_playbook("playbooks/sandbox.yml", inventory=inventory, limit=f"{HOST},localhost")
    assert started.rc == 0, started.failure_messages()

    # The preview on a host that has nothing yet: no failed task; the units in the diff; what would start and route.
    preview = deploy(inventory, "--check --diff")
    assert preview.rc == 0 and preview.results("runner_on_failed") == [], preview.failure_messages()
    diffs = [str(data["res"].get("diff")) for data in preview.results() if data["res"].get("diff")]
    for unit in ("sglang-30000.service", "sglang-30001.service", "sglang-router.service"):
        assert any(f"/etc/systemd/system/{unit}" in diff for diff in diffs), unit
    messages = [str(data["res"].get("msg", "")) for data in preview.results() + preview.results("runner_item_on_ok")]
    assert any("would enable sglang-30000.service" in message for message in messages)
    assert any("would start sglang-router.service" in message and "http://127.0.0.1:30001" in message for message in messages)
    assert "sglang-30000" not in on_host(HOST, "ls", "/etc/systemd/system"), "check mode wrote a unit"

    first = deploy(inventory)
    assert first.rc == 0, first.failure_messages()

    status = run_playbook("playbooks/status.yml", inventory=inventory, limit=HOST)
    assert status.rc == 0, status.failure_messages()
    table = next(data["res"]["msg"] for data in status.results() if data["task"].startswith("Show every instance"))
    rows = [line.split() for line in table[1:-1]]
    assert [(row[0], row[1], row[6], row[8]) for row in rows] == [
        (HOST, "sglang-30000", "NGRAM", "ready"),
        (HOST, "sglang-30001", "NGRAM", "ready"),
        (HOST, "router", "-", "ready"),
    ]
    assert table[1].endswith(f"http://127.0.0.1:30000 (on {HOST} only)")

    # The second run after a fresh install is the no-op.
    second = deploy(inventory)
    assert second.rc == 0, second.failure_messages()
    assert second.changed_count() == 0, second.changed()
    assert said(second) == f"{HOST}: 2 instance(s) planned, no problems. Nothing to change"

    # A router's key for a host with a router; no gateway key for a host that runs no gateway.
    assert (KEYS / HOST).is_file() and not (KEYS / f"gateway-{HOST}").exists()
    removed = run_playbook("playbooks/remove.yml", inventory=inventory, limit=HOST)
    assert removed.rc == 0, removed.failure_messages()
    assert sorted(path.name for path in KEYS.iterdir() if HOST in path.name) == []
    assert "sglang-" not in on_host(HOST, "ls", "/etc/systemd/system")
