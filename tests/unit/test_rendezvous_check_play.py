"""Preflight's TCP check between the nodes (roles/sglang_plan/tasks/nodes.yml, from rank 0's listener on) run by
ansible-playbook on two local hosts: rank 0 (r0) listens where its facts found the port free, the other node (r1)
connects. A program that takes the port after the facts were read answers r1 in rank 0's stead: rank 0's listener
cannot listen, and that is a problem line on r0, not a check that passed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from fleet import ROOT

FIRST = "Listen on rank 0's rendezvous port for the other nodes' check, where nothing listens there yet"


def check_tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROOT / "roles/sglang_plan/tasks/nodes.yml").read_text())
    return tasks[[task.get("name") for task in tasks].index(FIRST) :]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_check(tmp_path: Path, port: int) -> dict[str, list[str]]:
    """Each host's sglang_nodes_preflight_problems after the check."""
    item = {"instance": "sglang-30000", "group": "big", "port": port}
    hosts: dict[str, dict[str, Any]] = {
        "r0": {"_sglang_plan_host_facts": {"rendezvous": {"listen": [{**item, "peers": ["127.0.0.1"], "seconds": 6}],
                                                          "reach": []}}},
        "r1": {"_sglang_plan_host_facts": {"rendezvous": {
            "listen": [], "reach": [{**item, "rank_0": "r0", "address": "127.0.0.1", "seconds": 3}]}}},
    }  # fmt: skip
    for variables in hosts.values():
        variables.update(ansible_connection="local", ansible_python_interpreter=sys.executable)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    listener = yaml.safe_load((ROOT / "roles/sglang_plan/vars/main.yml").read_text())["_sglang_plan_rendezvous_listener"]
    settings = {"sglang_preflight_problems": [], "sglang_nodes_preflight_problems": [],
                "_sglang_plan_rendezvous_listener": listener}  # fmt: skip
    report = {
        "name": "Report",
        "ansible.builtin.copy": {
            "content": "{{ sglang_nodes_preflight_problems | to_json }}",
            "dest": str(tmp_path) + "/{{ inventory_hostname }}.json",
        },
    }
    play = [{"hosts": "all", "gather_facts": False, "vars": settings, "tasks": [*check_tasks(), report]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "none.cfg").write_text("")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
             "ANSIBLE_FORKS": "2", "ANSIBLE_ASYNC_DIR": str(tmp_path / "async")},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert not list((tmp_path / "async").glob("*")), "the listener's job file is removed once it ended"
    return {host: json.loads((tmp_path / f"{host}.json").read_text()) for host in hosts}


def test_the_nodes_reach_rank_0_s_listener(tmp_path: Path) -> None:
    assert run_check(tmp_path, free_port()) == {"r0": [], "r1": []}


def test_a_program_that_took_the_port_after_the_facts_is_a_problem_on_rank_0(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        problems = run_check(tmp_path, port)
    assert problems["r1"] == [], "the squatter answered r1's connection"
    [line] = problems["r0"]
    assert line.startswith(f"r0 instance sglang-30000: sglang_instance_groups.big.rendezvous_port={port}: rank 0 could not")
    assert f"cannot listen on port {port}" in line
