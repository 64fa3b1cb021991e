"""An instance that spans hosts on the sandbox: span0 and span1 (inventory/sandbox-span/span.yml) serve the tiny model at
tensor parallel 2, one stand-in GPU each, rank 0 on span0. Deployed and verified at rank 0; a changed setting restarts
both nodes; a node that fails its start makes the instance fail readiness, and both nodes roll back together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from fleet import ROOT, Run, http_status, on_host, run_playbook, unit_starts, wait_until

# The sandbox's inventory and these two hosts (`make sandbox-span`): `make sandbox` leaves them out.
SPAN = ROOT / "inventory/sandbox-span"
NODES = "span0,span1"
UNIT = "sglang-30000.service"


@pytest.fixture(scope="module")
def span() -> Run:
    hosts = run_playbook("playbooks/sandbox.yml", inventory=SPAN, limit=f"{NODES},localhost")
    assert hosts.rc == 0, hosts.failure_messages()
    deployed = run_playbook("deploy.yml", inventory=SPAN, limit=NODES)
    assert deployed.rc == 0, deployed.failure_messages()
    return deployed


def with_vars(tmp_path: Path, group: dict[str, object] | None = None, span1: dict[str, object] | None = None) -> Path:
    """The sandbox inventory with the instance's group entry and span1's own variables changed."""
    target = tmp_path / "inventory"
    shutil.copytree(SPAN, target, symlinks=False)
    path = target / "span.yml"
    inventory = yaml.safe_load(path.read_text())
    entry = inventory["span_instance"]["vars"]["sglang_instance_groups"][0]
    entry.update(group or {})
    inventory["sglang_servers"]["hosts"]["span1"].update(span1 or {})
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return target


def test_each_node_runs_its_rank_and_rank_0_serves_the_instance(span: Run) -> None:
    for rank, node in enumerate(("span0", "span1")):
        unit = on_host(node, "systemctl", "cat", UNIT)
        assert f"--nnodes 2 --node-rank {rank} --dist-init-addr span0:25000" in unit
    assert http_status("span0", "http://127.0.0.1:30000/health_generate") == 200
    assert http_status("span0", "http://127.0.0.1:30000/server_info") == 200
    # Rank 1 answers /health alone (SGLang's dummy health server).
    assert http_status("span1", "http://127.0.0.1:30000/health") == 200
    assert http_status("span1", "http://127.0.0.1:30000/server_info") == 404
    assert run_playbook("deploy.yml", inventory=SPAN, limit=NODES).changed() == []


def test_a_changed_setting_restarts_both_nodes_verified(span: Run, tmp_path: Path) -> None:
    before = {node: unit_starts(node)[UNIT] for node in ("span0", "span1")}
    inventory = with_vars(tmp_path, group={"server_args": {"dist-timeout": 20, "mem-fraction-static": 0.8}})
    result = run_playbook("deploy.yml", inventory=inventory, limit=NODES)
    assert result.rc == 0, result.failure_messages()
    after = {node: unit_starts(node)[UNIT] for node in ("span0", "span1")}
    assert all(before[node] != after[node] for node in before), "both nodes restarted"
    assert http_status("span0", "http://127.0.0.1:30000/health_generate") == 200


def test_a_node_that_fails_makes_both_roll_back_together(span: Run, tmp_path: Path) -> None:
    # The changed setting restarts both; span1's start fails (a rehearsed crash), so rank 0 never becomes ready.
    inventory = with_vars(
        tmp_path,
        group={"server_args": {"dist-timeout": 20, "mem-fraction-static": 0.7}},
        span1={"sglang_environment": {"SGLANG_SIM_FAIL_AT_START": "CUDA error: out of memory (rehearsal)"}},
    )
    result = run_playbook("deploy.yml", inventory=inventory, limit=NODES)
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert "Every node of tiny rolled back together" in report
    assert "CUDA error: out of memory (rehearsal)" in report
    for node in ("span0", "span1"):
        assert "0.7" not in on_host(node, "systemctl", "cat", UNIT), f"{node} has its last verified unit again"
    assert wait_until(lambda: http_status("span0", "http://127.0.0.1:30000/health_generate") == 200, 60)
    assert http_status("span1", "http://127.0.0.1:30000/health") == 200
