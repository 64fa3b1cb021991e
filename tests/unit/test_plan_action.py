"""Action sglang_plan: the host's facts gathered as module sglang_host_facts gathers them and the plan derived from that
answer, in one task. Run through ansible-playbook on this machine (local connection), its nvidia-smi replaying the real driver's
recording (one H200)."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleUndefinedVariable
from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
from conftest import plan_settings
from fleet import ROOT, local_play
from test_host_facts import H200_UUID, fake_nvidia_smi

TABLES = sorted(str(path) for path in (ROOT / "roles/sglang_plan/files").glob("sglang-*.json"))


def run_plan(
    tmp_path: Path,
    host_facts: dict[str, Any] | None,
    settings: dict[str, Any] | None,
    variables: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A play (with `variables`) of the action's task (with `host_facts` and `settings` unless None) and a task that
    writes its answer and the host's facts it set (facts.json)."""
    given = {"settings": settings} if settings is not None else {}
    given |= {"host_facts": host_facts} if host_facts is not None else {}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": variables or {},
            "tasks": [
                {
                    "sglang.fleet.sglang_plan": {**given, "support_tables": TABLES},
                    "register": "answer",
                },
                {
                    "ansible.builtin.copy": {
                        "dest": str(tmp_path / "facts.json"),
                        "content": "{{ {'answer': answer, 'sglang_host': ansible_facts.sglang_host} | to_json }}",
                    }
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    return local_play(tmp_path / "play.yml")


def test_the_plan_is_derived_from_the_module_s_answer(stand_in_model_dir: Path, tmp_path: Path) -> None:
    settings = plan_settings("ct129")
    host_facts = {"nvidia_smi": fake_nvidia_smi(tmp_path), "model": {"path": str(stand_in_model_dir)}}
    run = run_plan(tmp_path, host_facts, settings)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    seen = json.loads((tmp_path / "facts.json").read_text())
    assert [gpu["uuid"] for gpu in seen["sglang_host"]["gpus"]] == [H200_UUID], "the module's answer, as the host's fact"
    assert seen["answer"]["model"]["path"] == str(stand_in_model_dir), "and the model directory it read"
    expected = sglang_plan(
        settings,
        {**seen["sglang_host"], "model": seen["answer"]["model"], "group_models": {}},
        TABLES,
    )
    assert seen["answer"]["plan"] == expected
    # ct129's settings ask for two GPUs per instance: this host has one.
    assert any("1 GPU(s) [0] hold 0 instance(s) of 2 GPU(s)" in problem for problem in expected["problems"]), expected
    assert seen["answer"]["rendezvous"] == {"listen": [], "reach": []}, "no nodes' check for a plan with problems"
    assert seen["answer"]["spans_hosts"] is False, "no instance across hosts: the role includes no nodes' tasks"


def test_the_nodes_check_comes_with_the_plan_and_none_with_its_problems() -> None:
    """What the role's next tasks open and reach between the nodes of an instance across hosts (module_utils/multinode.py
    rendezvous_checks), from the plan's instances and the ports the host listens on; nothing where the plan has
    problems (it is refused: its nodes are not checked)."""
    from ansible_collections.sglang.fleet.plugins.action.sglang_plan import rendezvous

    rank_0 = {"name": "sglang-30000", "group": "big", "node_rank": 0, "rendezvous_port": 25000,
              "node_addresses": ["10.0.0.1", "10.0.0.2"]}  # fmt: skip
    listen = {"instance": "sglang-30000", "group": "big", "port": 25000, "peers": ["10.0.0.2"]}
    checked = rendezvous({"instances": [rank_0], "problems": []}, [])
    assert [{key: entry[key] for key in listen} for entry in checked["listen"]] == [listen] and checked["reach"] == []
    assert rendezvous({"instances": [rank_0], "problems": []}, [{"port": 25000}]) == {"listen": [], "reach": []}
    assert rendezvous({"instances": [rank_0], "problems": ["b200 ..."]}, []) == {"listen": [], "reach": []}


def test_a_failed_module_call_fails_the_task_and_plans_nothing(tmp_path: Path) -> None:
    run = run_plan(
        tmp_path, {"nvidia_smi": "nvidia-smi", "model": {"path": "/srv/m", "no_such_option": 1}}, plan_settings("ct129")
    )
    assert run.returncode != 0
    assert "no_such_option" in run.stdout, run.stdout[-3000:]
    assert not (tmp_path / "facts.json").exists()


def test_without_settings_the_action_gathers_them_from_the_host_s_variables(stand_in_model_dir: Path, tmp_path: Path) -> None:
    """The role passes no settings: the action gathers them (plugin_utils/plan_settings.py) from the variables as
    Ansible templates them (one given as a template here), and gives the module the served model directory."""
    variables = {
        **yaml.safe_load((ROOT / "roles/sglang_plan/defaults/main.yml").read_text()),
        **yaml.safe_load((ROOT / "inventory/production/host_vars/ct129.yml").read_text()),
        "sglang_model_path": f"{{{{ '{stand_in_model_dir}' }}}}",
        "role_path": str(ROOT / "roles/sglang_plan"),
    }
    host_facts = {"nvidia_smi": fake_nvidia_smi(tmp_path), "model": {}}
    run = run_plan(tmp_path, host_facts, None, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    seen = json.loads((tmp_path / "facts.json").read_text())
    assert seen["answer"]["model"]["path"] == str(stand_in_model_dir), "the module read the served directory"
    settings = {**plan_settings("ct129", sglang_model_path=str(stand_in_model_dir)), "host": "localhost"}
    host = {**seen["sglang_host"], "model": seen["answer"]["model"], "group_models": {}}
    assert seen["answer"]["plan"] == sglang_plan(settings, host, TABLES)
    assert seen["answer"]["plan"]["instances"] == [] and seen["answer"]["plan"]["problems"], "ct129's shape, one GPU here"


def test_without_host_facts_the_action_takes_the_module_s_options_from_the_host_s_variables(
    stand_in_model_dir: Path, tmp_path: Path
) -> None:
    """The role's task gives no options: nvidia-smi, the fact subsets, the model's checked files and the servers'
    account come from the variables (read once each, in Python), as the role's task once templated them."""
    variables = {
        **yaml.safe_load((ROOT / "roles/sglang_plan/defaults/main.yml").read_text()),
        **yaml.safe_load((ROOT / "inventory/production/host_vars/ct129.yml").read_text()),
        "sglang_model_path": str(stand_in_model_dir),
        "sglang_plan_nvidia_smi": fake_nvidia_smi(tmp_path),
        "sglang_plan_gather_subset": ["!all", "min"],
        "sglang_plan_verified_file": str(tmp_path / "verified.json"),
        "role_path": str(ROOT / "roles/sglang_plan"),
    }
    run = run_plan(tmp_path, None, None, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    seen = json.loads((tmp_path / "facts.json").read_text())
    assert [gpu["uuid"] for gpu in seen["sglang_host"]["gpus"]] == [H200_UUID], "the variables' nvidia-smi"
    assert seen["answer"]["model"]["path"] == str(stand_in_model_dir), "the module read the served directory"


def test_the_module_s_options_from_the_variables_check_the_lock_s_files_for_an_sglang_model() -> None:
    from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import MISSING
    from ansible_collections.sglang.fleet.plugins.plugin_utils.plan_settings import host_facts_options

    variables = {"sglang_model_sha256": {"config.json": "a" * 64}, "sglang_plan_gather_subset": ["min"],
                 "sglang_plan_verified_file": "/v.json", "sglang_server_user": "llm"}  # fmt: skip

    def variable(name: str, default: Any) -> Any:
        if name in variables:
            return variables[name]
        assert default is not MISSING, name
        return default

    settings = {"nvidia_smi": "nvidia-smi", "model_sourced": False, "model_source": {},
                "server_args": {"tokenizer-path": "/srv/tok"}, "instance_overrides": {},
                "instance_groups": [{"name": "g", "model_path": "/srv/g"}]}  # fmt: skip
    options = host_facts_options(variable, settings)
    assert options == {
        "nvidia_smi": "nvidia-smi",
        "gather_subset": ["min"],
        "model": {"sha256": {"config.json": "a" * 64}, "user": "llm", "group": "sglang", "verified_file": "/v.json",
                  "tokenizer_paths": ["/srv/tok"]},
        "group_models": ["/srv/g"],
        "pythons": ["python3"],
    }  # fmt: skip
    variables["sglang_venv_python"] = "/opt/py/bin/python3.12"
    assert host_facts_options(variable, settings)["pythons"] == ["/opt/py/bin/python3.12"], "asked in the same call"
    variables["sglang_venv_python"] = ["not", "a", "name"]
    assert host_facts_options(variable, settings)["pythons"] == [], "not asked: the venv's preflight says so"

    def facts_template(name: str, default: Any) -> Any:  # as Ansible templates one that reads the facts not yet gathered
        if name == "sglang_venv_python":
            raise AnsibleUndefinedVariable("'ansible_facts' is undefined")
        return variable(name, default)

    assert host_facts_options(facts_template, settings)["pythons"] == [], "not asked: the venv's preflight says so"
    # As the action reads it: Ansible's templar, before the facts the call gathers exist.
    from ansible.template import Templar, trust_as_template
    from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import host_variable

    task_vars = {**variables, "sglang_venv_python": trust_as_template("{{ ansible_facts.python.executable }}")}
    templar = Templar(variables=task_vars)
    options = host_facts_options(lambda name, default: host_variable(templar, task_vars, name, default), settings)
    assert options["pythons"] == [] and options["gather_subset"] == ["min"]
    sourced = {**settings, "model_sourced": True, "model_source": {"sha256": {"model.safetensors": "b" * 64}}}
    assert host_facts_options(variable, sourced)["model"]["sha256"] == {"model.safetensors": "b" * 64}
    # An sglang_model before its source is published (no control node's copy): sglang_model_sha256, as the role did.
    assert host_facts_options(variable, {**sourced, "model_source": {}})["model"]["sha256"] == {"config.json": "a" * 64}


def executed_modules(action: str) -> set[str]:
    """The modules an action plugin runs on the host (each `_execute_module(module_name=...)` of its source)."""
    tree = ast.parse((ROOT / "plugins/action" / f"{action}.py").read_text())
    return {
        str(keyword.value.value)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "_execute_module"
        for keyword in call.keywords
        if keyword.arg == "module_name" and isinstance(keyword.value, ast.Constant)
    }


def test_the_plan_and_deploys_probe_run_one_module() -> None:
    """Deploy's two calls to a host, the plan's gathering and the probe, run the same module: Ansible builds a module's
    payload (the module and every module_utils it imports, each parsed) once per run, so the second call reuses it."""
    assert executed_modules("sglang_plan") == executed_modules("sglang_instance_files") == {"sglang.fleet.sglang_instance_files"}
