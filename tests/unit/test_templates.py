"""The unit and environment file templates, rendered from the planned instances."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from fleet import ROOT
from systemd import FilterModule as SystemdFilters

Plan = Callable[..., dict[str, Any]]
SERVER = ROOT / "roles/sglang_server"


def render(name: str, **variables: Any) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SERVER / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(CoreFilters().filters())
    environment.filters.update(SystemdFilters().filters())
    defaults = yaml.safe_load((SERVER / "defaults/main.yml").read_text())
    context = {
        **defaults,
        "ansible_managed": "Managed by Ansible",
        "sglang_venv_runtime": "sglang",
        "sglang_venv_bin": "/opt/sglang/sglang-0.5.23/bin",
        "sglang_server_helper_dir": "/usr/local/lib/sglang-fleet",
        "sglang_server_secrets_dir": "/etc/sglang-fleet/secrets",
        "sglang_api_key": "",
        "sglang_server_systemd_version": 252,
        "sglang_venv_launcher": {"sglang": ["/opt/sglang/sglang-0.5.23/bin/python", "-m", "sglang.launch_server"]},
        "sglang_server_base_environment": {"CUDA_HOME": "/usr/local/cuda", "HOME": "/var/lib/sglang"},
        **variables,
    }
    role_vars = yaml.safe_load((SERVER / "vars/main.yml").read_text())
    for variable in ("sglang_server_devices_unit", "sglang_server_root_path"):
        context[variable] = role_vars[variable]
    context["sglang_server_sandbox"] = [
        environment.from_string(item).render(**context) for item in role_vars["sglang_server_sandbox"]
    ]
    return environment.get_template(name).render(**context)


def unit_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


@pytest.mark.parametrize("host", ["ct129", "b200"])
def test_unit_runs_the_planned_command_line(plan: Plan, host: str) -> None:
    for instance in plan(host)["instances"]:
        text = render("sglang.service.j2", sglang_server_instance=instance)
        assert text.startswith("#\n# Managed by Ansible\n#\n")
        unit = unit_lines(text)
        argv = shlex.split(unit["ExecStart"])
        assert argv[:3] == ["/opt/sglang/sglang-0.5.23/bin/python", "-m", "sglang.launch_server"]
        assert argv[3:] == instance["argv"]
        assert unit["EnvironmentFile"] == f"/etc/sglang-fleet/{instance['name']}.env"
        assert unit["Restart"] == "on-failure"
        assert unit["SuccessExitStatus"] == "SIGKILL" and unit["RestartForceExitStatus"] == "SIGKILL"
        assert unit["KillMode"] == "control-group"
        pre = unit["ExecStartPre"]
        assert pre.startswith("+/usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ")
        assert " -I /usr/local/lib/sglang-fleet/check_gpus_free.py --wait 30 --gpus " in pre
        assert pre.endswith(f"--gpus {','.join(instance['gpu_uuids'])}")
        assert [line for line in text.splitlines() if line.startswith("DeviceAllow=/dev/nvidia") and line[23:24].isdigit()] == [
            f"DeviceAllow={device} rw" for device in instance["gpu_devices"]
        ]
        assert unit["DevicePolicy"] == "closed" and unit["ProtectSystem"] == "strict" and unit["CapabilityBoundingSet"] == ""
        assert unit["User"] == "sglang"
        assert unit["SyslogIdentifier"] == instance["name"]
        assert "nohup" not in text and "/bin/sh" not in text


def test_environment_file_has_the_instance_gpus_and_the_base(plan: Plan) -> None:
    instance = plan("b200", sglang_environment={"NCCL_DEBUG": "WARN", "GREETING": "hello world"})["instances"][5]
    text = render("sglang.env.j2", sglang_server_instance=instance)
    values = unit_lines(text)
    assert values["CUDA_VISIBLE_DEVICES"] == "GPU-b200-5"
    assert values["CUDA_HOME"] == "/usr/local/cuda"
    assert values["NCCL_DEBUG"] == "WARN"
    assert values["GREETING"] == '"hello world"'
    assert list(values) == sorted(values), "sorted, so a rendering is stable"


def test_an_api_key_goes_to_a_config_file_never_to_the_command_line(plan: Plan) -> None:
    instance = plan("ct129")["instances"][0]
    text = render("sglang.service.j2", sglang_server_instance=instance, sglang_api_key="s3cret")
    assert "s3cret" not in text
    argv = shlex.split(unit_lines(text)["ExecStart"])
    assert argv[-2:] == ["--config", "/etc/sglang-fleet/secrets/sglang-30000.yaml"]
    assert render("sglang.secret.yaml.j2", sglang_server_instance=instance, sglang_api_key='a "quoted" key').endswith(
        'api-key: "a \\"quoted\\" key"\n'
    )


@pytest.mark.parametrize(
    ("systemd", "api_key", "backs_off", "filters_key"),
    [(252, "sk-test", False, False), (253, "sk-test", False, True), (253, "", False, False), (255, "sk-test", True, True)],
)
def test_unit_uses_newer_systemd_where_the_host_has_it(
    plan: Plan, systemd: int, api_key: str, backs_off: bool, filters_key: bool
) -> None:
    instance = plan("b200")["instances"][0]
    text = render(
        "sglang.service.j2", sglang_server_instance=instance, sglang_server_systemd_version=systemd, sglang_api_key=api_key
    )
    unit = unit_lines(text)
    assert ("RestartSteps" in unit and unit["RestartMaxDelaySec"] == "300") is backs_off
    assert (unit.get("LogFilterPatterns") == "~api_key") is filters_key
    assert api_key not in text or not api_key
