"""The fleet-wide gate collects every role's preflight problems by the fact's name, not from a list to keep in step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.filter.preflight import (
    problem_facts,
    sglang_preflight_refusal,
    sglang_preflight_report,
    sglang_preflight_unchecked,
)
from conftest import ROOT


def test_every_role_problem_fact_is_found_by_name_with_the_plan_first() -> None:
    names = [
        "sglang_venv_preflight_problems",
        "ansible_host",
        "cuda_preflight_problems",
        "sglang_preflight_problems",
        "preflight_problems",
        "sglang_server_preflight_problems_count",
        "new_role_preflight_problems",
    ]
    assert problem_facts(names) == [
        "sglang_preflight_problems",
        "cuda_preflight_problems",
        "new_role_preflight_problems",
        "sglang_venv_preflight_problems",
    ]


def test_the_report_lists_each_host_problems_in_host_order_and_skips_empty_or_unset_facts() -> None:
    hostvars = {
        "b200": {"sglang_preflight_problems": ["b200 plan"], "cuda_preflight_problems": None, "x": 1},
        "ct129": {"some_new_role_preflight_problems": ["ct129 new role"], "sglang_preflight_problems": []},
        "idle": {},
    }
    assert sglang_preflight_report(["ct129", "idle", "b200"], hostvars) == ["ct129 new role", "b200 plan"]


def test_the_refusal_is_the_host_own_and_names_the_others_with_problems() -> None:
    hostvars = {
        "ct129": {"sglang_preflight_problems": [], "sglang_server_preflight_warnings": ["ct129: cache"]},
        "b200": {"sglang_preflight_problems": ["b200 host: x"], "cuda_preflight_problems": ["b200 host: y"],
                 "sglang_server_preflight_warnings": ["b200: cache"]},
        "h100": {"sglang_venv_preflight_problems": ["h100 host: z"]},
    }  # fmt: skip
    hosts = ["ct129", "b200", "h100"]
    assert sglang_preflight_refusal("ct129", hosts, hostvars) == [], "a warning refuses nothing"
    assert sglang_preflight_refusal("b200", hosts, hostvars) == [
        "b200: preflight found 2 problem(s) on this host (and on h100, reported there); nothing was changed on any host:",
        "b200 host: x",
        "b200 host: y",
        "WARNING: b200: cache",
    ]
    assert sglang_preflight_unchecked([]) == []
    assert sglang_preflight_unchecked(["b200"])[1].startswith("b200 host: preflight did not complete")


GATE_PLAY = """
- name: Hosts that passed or failed preflight, then the gate
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail before the gate where asked (a role's argument check)
      ansible.builtin.fail:
        msg: early
      when: fail_early | default(false) | bool
    - name: Publish the problems
      ansible.builtin.set_fact:
        sglang_preflight_problems: "{{ problems | default([]) }}"
    - name: The gate
      ansible.builtin.import_role:
        name: sglang.fleet.sglang_plan
        tasks_from: gate
        rolespec_validate: false
    - name: After the gate
      ansible.builtin.debug:
        msg: deployed
"""


def run_gate(tmp_path: Path, b200: str) -> dict[str, Any]:
    """The gate played on ct129 (no problem) and b200 (`b200`: its inventory variables), local: the JSON callback's
    report."""
    (tmp_path / "play.yml").write_text(GATE_PLAY)
    (tmp_path / "hosts").write_text(f"ct129 ansible_connection=local\nb200 ansible_connection=local {b200}\n")
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts", "play.yml",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
             "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")},
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout[-3000:] + ran.stderr[-3000:]
    report: dict[str, Any] = json.loads(ran.stdout)
    return report


def task_results(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(task["hosts"] for task in report["plays"][0]["tasks"] if task["task"]["name"].endswith(name))


def test_a_refused_deploy_fails_only_the_host_with_the_problem_and_stops_every_host(tmp_path: Path) -> None:
    report = run_gate(tmp_path, "problems='[\"b200 host: sglang_x=1: bad; fix: 2\"]'")
    assert {host: stats["failures"] for host, stats in report["stats"].items()} == {"ct129": 0, "b200": 1}
    refused = task_results(report, "Refuse the deploy on each host that has a problem")
    assert refused["b200"]["msg"][1:] == ["b200 host: sglang_x=1: bad; fix: 2"]
    assert list(refused) == ["b200"], "the host without a problem does not include the refusal's tasks"
    assert not any(task["task"]["name"] == "After the gate" for task in report["plays"][0]["tasks"])


def test_a_host_that_failed_before_the_gate_stops_the_others_without_failing_them(tmp_path: Path) -> None:
    report = run_gate(tmp_path, "fail_early=True")
    assert {host: stats["failures"] for host, stats in report["stats"].items()} == {"ct129": 0, "b200": 1}
    said = task_results(report, "Say why every host stops when a host did not complete preflight")
    assert list(said) == ["ct129"]
    assert "b200 host: preflight did not complete" in said["ct129"]["msg"][1]
    assert not any(task["task"]["name"] == "After the gate" for task in report["plays"][0]["tasks"])
