"""Preflight's parser check never runs the model's code as root (issue 38, finding 3).

SGLang's prepare_server_args loads the model's config with the unit's --trust-remote-code; a config.json with
auto_map then imports the model's own configuration_*.py. The check used to run as root (ansible.builtin.command);
it now runs as the servers' account in their units' sandbox (sglang_sandboxed_command: systemd-run, the mechanism of
the CUDA smoke check), and trust-remote-code with such a model needs sglang_allow_model_code.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_server_host_properties, systemd_hardening
from ansible_collections.sglang.fleet.plugins.modules import sglang_sandboxed_command as module
from fleet import ROOT

Plan = Callable[..., dict[str, Any]]
SANDBOX = ["User=sglang", "Group=sglang", "WorkingDirectory=/var/lib/sglang", *systemd_hardening(["/var/lib/sglang"])]


class Done:
    def __init__(self, returncode: int, stdout: str, stderr: str = "") -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def test_the_check_runs_through_systemd_run_as_the_account_with_an_isolated_python(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def runner(argv: list[str], **kwargs: Any) -> Done:
        env_file = next(
            a.removeprefix("--property=EnvironmentFile=") for a in argv if a.startswith("--property=EnvironmentFile=")
        )
        seen.update(
            argv=argv, kwargs=kwargs, environment=Path(env_file).read_text(), mode=stat.S_IMODE(os.stat(env_file).st_mode)
        )
        return Done(0, '{"sglang-30000": {"rc": 0, "error": ""}}')

    checker = ["/opt/sglang/sglang-0.5.23/bin/python", "-I", "/opt/sglang/sglang-0.5.23/check_server_args.py", "p:f"]
    result = module.run("parse-check", checker, SANDBOX, {"HOME": "/var/lib/sglang"}, '{"x": []}', 60, runner, str(tmp_path))
    argv = seen["argv"]
    assert argv[:5] == ["systemd-run", "--wait", "--pipe", "--quiet", "--collect"]
    assert "--property=User=sglang" in argv and "--property=NoNewPrivileges=yes" in argv
    assert "--property=ProtectSystem=strict" in argv and "--property=RuntimeMaxSec=60" in argv
    assert argv[argv.index("--") + 1 :] == checker, "the runtime's Python, isolated (-I), runs the checker"
    assert seen["kwargs"]["input"] == '{"x": []}'
    assert "env" not in seen["kwargs"], "the caller's environment is not handed on; systemd starts the unit afresh"
    assert seen["environment"] == 'HOME="/var/lib/sglang"\n' and seen["mode"] == 0o600
    assert list(tmp_path.iterdir()) == [], "the environment file is removed"
    assert result["rc"] == 0 and result["stdout"].startswith('{"sglang-30000"')


def test_the_host_properties_allow_every_planned_gpu_and_no_other(plan: Plan) -> None:
    instances = plan("ct129")["instances"]
    properties = sglang_server_host_properties(instances, SANDBOX)
    assert properties[: len(SANDBOX)] == SANDBOX
    assert properties[len(SANDBOX) :] == [f"DeviceAllow=/dev/nvidia{gpu} rw" for gpu in (0, 1)]


def test_preflight_parses_through_the_sandboxed_module_never_as_root() -> None:
    tasks = yaml.safe_load((ROOT / "roles/sglang_venv/tasks/checks.yml").read_text())
    (task,) = [task for task in tasks if task.get("register") == "_sglang_venv_parsed"]
    assert "ansible.builtin.command" not in task and "become_user" not in task
    arguments = task["sglang.fleet.sglang_sandboxed_command"]
    assert "sglang_service.sandbox" in arguments["properties"] and "sglang_service.environment" in arguments["environment"]
    assert task["no_log"] is True
    assert task["failed_when"] is False, "Ansible fails a result with rc != 0: a check that could not run is no failure"
    assert "accounts" in task["when"], "not before the account exists"
    assert arguments["argv"] == "{{ _sglang_venv_host.args_checker }}"
    from venv_host import venv_host

    assert venv_host()["args_checker"][:3] == [
        "/opt/sglang/sglang-0.5.23/bin/python", "-I", "/opt/sglang/sglang-0.5.23/check_server_args.py",
    ], "isolated: the model's folder is no import path"  # fmt: skip
    server = yaml.safe_load((ROOT / "roles/sglang_server/tasks/preflight.yml").read_text())
    published = next(task for task in server if "sglang_service" in task.get("ansible.builtin.set_fact", {}))
    assert "'sandbox': _sglang_server_sandbox," in published["ansible.builtin.set_fact"]["sglang_service"]


@pytest.mark.parametrize(
    ("auto_map", "allowed", "trust", "problem"),
    [(True, False, True, True), (True, True, True, False), (False, False, True, False), (True, False, False, False)],
)
def test_trust_remote_code_with_a_model_of_its_own_code_needs_the_opt_in(
    support_tables: list[dict[str, Any]], model_facts: dict[str, Any], auto_map: bool, allowed: bool, trust: bool, problem: bool
) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    args = {"trust-remote-code": True} if trust else {}
    settings = plan_settings("ct129", sglang_server_args=args, sglang_allow_model_code=allowed)
    problems = sglang_plan(settings, host_facts("ct129", {**model_facts, "auto_map": auto_map}), support_tables)["problems"]
    found = [p for p in problems if "auto_map" in p]
    assert bool(found) is problem, problems
    if problem:
        (line,) = found
        assert line.startswith("ct129 instance sglang-30000: sglang_server_args.trust-remote-code=true: the model's config.json")
        assert line.endswith("fix: read that code, then set sglang_allow_model_code: true; or remove trust-remote-code")
