"""An instance that spans hosts on the sandbox: span0 and span1 (inventory/sandbox-span/span.yml) serve the tiny model at
tensor parallel 2, one stand-in GPU each, rank 0 on span0, behind a fleet gateway on span0. Deployed and verified at rank
0 and through the gateway; a changed setting restarts both nodes; a node that fails its start, or whose unit is stopped
(while serving or while the instance rolls), makes the instance fail readiness, and both nodes roll back together."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import (
    ROOT,
    SPAN_GATEWAY,
    Run,
    chat_requests,
    http_status,
    on_host,
    registered_workers,
    run_playbook,
    unit_starts,
    wait_until,
)

# The sandbox's inventory and these two hosts (`make sandbox-span`): `make sandbox` leaves them out.
SPAN = ROOT / "inventory/sandbox-span"
NODES = "span0,span1"
UNIT = "sglang-30000.service"
HEALTH = "http://127.0.0.1:30000/health_generate"
# The instance's URL (rank 0's port) as the gateway on span0 knows it, and the model it serves.
RANK_0 = "http://127.0.0.1:30000"
MODEL = "tiny-qwen3.5"
# A chat completion through span0's gateway (keyless here, as the sandbox's servers are); prints the status.
ASK_GATEWAY = (
    "import json, sys, urllib.request, urllib.error\n"
    "body = json.dumps({'model': sys.argv[1], 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4})\n"
    "request = urllib.request.Request('http://127.0.0.1:30200/v1/chat/completions', data=body.encode(),\n"
    "    headers={'Content-Type': 'application/json'})\n"
    "try:\n    print(urllib.request.urlopen(request, timeout=30).status)\n"
    "except urllib.error.HTTPError as error:\n    print(error.code)\n"
)


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


def test_the_gateway_routes_to_rank_0_alone_and_rank_0_answers(span: Run) -> None:
    assert registered_workers("span0", SPAN_GATEWAY) == {RANK_0: (MODEL, True)}
    before = chat_requests("span0", 30000)
    assert on_host("span0", "python3", "-c", ASK_GATEWAY, MODEL).strip() == "200"
    assert chat_requests("span0", 30000) == before + 1


def test_a_node_that_cannot_reach_rank_0s_rendezvous_port_is_refused_before_any_change(span: Run, tmp_path: Path) -> None:
    """Preflight's TCP check: span1 reaches rank 0 at an address that answers nothing (TEST-NET-1), so the deploy is
    refused, naming the node, the instance and the variable, and nothing changes on either node."""
    before = {node: unit_starts(node)[UNIT] for node in ("span0", "span1")}
    inventory = with_vars(tmp_path, group={"server_args": {"dist-timeout": 20, "mem-fraction-static": 0.75}})
    span0 = inventory / "host_vars" / "span0.yml"
    span0.write_text(yaml.safe_dump({"sglang_advertise_host": "192.0.2.1"}))
    result = run_playbook("deploy.yml", inventory=inventory, limit=NODES)
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert (
        "span1 instance sglang-30000: sglang_instance_groups.tiny.rendezvous_port=25000: node span1 cannot reach rank 0"
        " (span0) at 192.0.2.1:25000 within 5 s"
    ) in report, report
    assert result.changed() == []
    assert {node: unit_starts(node)[UNIT] for node in ("span0", "span1")} == before


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


def test_a_node_stopped_while_serving_fails_the_instance_and_the_next_deploy_brings_both_back(span: Run) -> None:
    on_host("span1", "systemctl", "stop", UNIT)
    # Rank 0's collectives fail with its peer gone: it crashes, and restarted by systemd waits at the rendezvous.
    assert wait_until(lambda: http_status("span0", HEALTH) != 200, 20), "rank 0 still ready without span1"
    assert on_host("span0", "python3", "-c", ASK_GATEWAY, MODEL).strip() != "200"
    journal = on_host("span0", "journalctl", "--no-pager", "-u", UNIT, "-n", "200")
    assert "Connection closed by peer" in journal
    # The deploy starts span1's unit (not running); rank 0, restarted by systemd, waits for it at the rendezvous.
    result = run_playbook("deploy.yml", inventory=SPAN, limit=NODES)
    assert result.rc == 0, result.failure_messages()
    assert wait_until(lambda: http_status("span0", HEALTH) == 200, 60)
    assert http_status("span1", "http://127.0.0.1:30000/health") == 200
    # The gateway's health checks find rank 0 again.
    assert wait_until(lambda: on_host("span0", "python3", "-c", ASK_GATEWAY, MODEL).strip() == "200", 90)


def test_a_node_stopped_while_the_instance_rolls_makes_both_roll_back_together(span: Run, tmp_path: Path) -> None:
    """A changed setting restarts both nodes; once span1 joined (its /health answers) and rank 0 still loads (slowed
    here), span1's unit is stopped: rank 0 fails readiness, and both nodes restore their last verified units."""
    before = unit_starts("span1")[UNIT]
    inventory = with_vars(tmp_path, group={"server_args": {"dist-timeout": 20, "mem-fraction-static": 0.6}})
    span0 = inventory / "host_vars" / "span0.yml"
    span0.write_text(yaml.safe_dump({"sglang_environment": {"SGLANG_SIM_LOAD_SECONDS": "15"}}))
    stopped: list[str] = []

    def stop_span1_once_joined() -> None:
        joined = wait_until(
            lambda: unit_starts("span1")[UNIT] != before and http_status("span1", "http://127.0.0.1:30000/health") == 200,
            60,
        )
        if joined:
            on_host("span1", "systemctl", "stop", UNIT)
            stopped.append("span1")

    stopper = threading.Thread(target=stop_span1_once_joined, daemon=True)

    def on_event(event: dict[str, Any]) -> None:
        """From the start of the task that restarts every node at once."""
        task = str((event.get("event_data") or {}).get("task") or "")
        if event.get("event") == "playbook_on_task_start" and "span hosts on every node" in task and not stopper.ident:
            stopper.start()

    result = run_playbook("deploy.yml", inventory=inventory, limit=NODES, on_event=on_event)
    stopper.join(timeout=5)
    assert stopped == ["span1"], "span1 was not stopped during the rollout"
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    assert "Every node of tiny rolled back together" in report
    assert "Connection closed by peer" in report
    for node in ("span0", "span1"):
        unit = on_host(node, "systemctl", "cat", UNIT)
        assert "0.6" not in unit and "SGLANG_SIM_LOAD_SECONDS=15" not in unit, f"{node} has its last verified unit again"
    assert wait_until(lambda: http_status("span0", HEALTH) == 200, 60)
    assert http_status("span1", "http://127.0.0.1:30000/health") == 200
