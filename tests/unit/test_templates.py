"""The unit and environment file templates, rendered from the planned instances."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import FilterModule as RoleSettingsFilters
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import FilterModule as RouterFilters
from ansible_collections.sglang.fleet.plugins.filter.systemd import FilterModule as SystemdFilters
from fleet import ROOT, collection_filters, router_settings
from jinja2.nativetypes import NativeEnvironment

Plan = Callable[..., dict[str, Any]]
SERVER = ROOT / "roles/sglang_server"
ROUTER = ROOT / "roles/sglang_router"
LAUNCHER = ["/opt/sglang/sglang-0.5.23/bin/python", "-I", "/usr/local/lib/sglang-fleet/sglang_launcher.py"]


def render(name: str, **variables: Any) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SERVER / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(CoreFilters().filters())
    environment.filters.update(collection_filters(SystemdFilters))
    defaults = yaml.safe_load((SERVER / "defaults/main.yml").read_text())
    # The sglang_venv role's published fact, for the runtime it names (the server reads nothing else of that role).
    runtime = variables.pop("sglang_venv_runtime", "sglang")
    venv_vars = yaml.safe_load((ROOT / "roles/sglang_venv/vars/main.yml").read_text())
    context = {
        **defaults,
        "ansible_managed": "Managed by Ansible",
        "sglang_runtime": {
            "python": "/opt/sglang/sglang-0.5.23/bin/python",
            "module": venv_vars["_sglang_venv_server_module"][runtime],
        },
        "_sglang_server_helper_dir": "/usr/local/lib/sglang-fleet",
        "sglang_server_secrets_dir": "/etc/sglang-fleet/secrets",
        "sglang_api_key": "",
        "_sglang_server_systemd_version": 252,
        "_sglang_server_base_environment": {"CUDA_HOME": "/usr/local/cuda", "HOME": "/var/lib/sglang"},
        **variables,
    }
    role_vars = yaml.safe_load((SERVER / "vars/main.yml").read_text())
    for variable in ("_sglang_server_devices_unit", "_sglang_server_root_path"):
        context[variable] = role_vars[variable]
    context["_sglang_server_launcher"] = [
        environment.from_string(word).render(**context) for word in role_vars["_sglang_server_launcher"]
    ]
    native = NativeEnvironment()
    native.filters.update(collection_filters(SystemdFilters))
    native.filters.update(collection_filters(RoleSettingsFilters))
    context.setdefault("sglang_server_read_write_paths", [])
    context["_sglang_server_sandbox"] = native.from_string(role_vars["_sglang_server_sandbox"]).render(**context)
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
        # The venv's isolated Python runs the fleet's launcher (keys out of the journal), which runs SGLang's module.
        assert argv[:4] == [*LAUNCHER, "sglang.launch_server"]
        assert argv[4:] == instance["argv"]
        assert unit["EnvironmentFile"] == f"/etc/sglang-fleet/{instance['name']}.env"
        assert unit["Restart"] == "on-failure"
        assert unit["SuccessExitStatus"] == "SIGKILL" and unit["RestartForceExitStatus"] == "SIGKILL"
        assert unit["KillMode"] == "control-group"
        pre = unit["ExecStartPre"]
        assert pre.startswith("+/usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ")
        assert " -I -S /usr/local/lib/sglang-fleet/check_gpus_free.py --wait 30 --gpus " in pre
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
    instance = plan("ct129", sglang_api_key="s3cret")["instances"][0]
    text = render("sglang.service.j2", sglang_server_instance=instance, sglang_api_key="s3cret")
    assert "s3cret" not in text
    argv = shlex.split(unit_lines(text)["ExecStart"])
    assert argv[-2:] == ["--config", "/etc/sglang-fleet/secrets/sglang-30000.yaml"]
    assert argv[4:] == instance["argv"], "the unit runs exactly the planned argv, which preflight parses"
    assert instance["config_file"] == "/etc/sglang-fleet/secrets/sglang-30000.yaml"
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
        "sglang.service.j2", sglang_server_instance=instance, _sglang_server_systemd_version=systemd, sglang_api_key=api_key
    )
    unit = unit_lines(text)
    assert ("RestartSteps" in unit and unit["RestartMaxDelaySec"] == "300") is backs_off
    assert (unit.get("LogFilterPatterns") == "~api_key") is filters_key
    assert api_key not in text or not api_key


def test_the_writer_puts_each_instance_file_where_the_plan_says(plan: Plan) -> None:
    templates = yaml.safe_load((SERVER / "vars/main.yml").read_text())["_sglang_server_instance_templates"]
    instance = plan("b200", sglang_api_key="k")["instances"][0]
    assert {template["file"]: template["src"] for template in templates} == {
        "unit": "sglang.service.j2",
        "environment": "sglang.env.j2",
        "secret": "sglang.secret.yaml.j2",
    }
    assert all(instance["files"][template["file"]] for template in templates)
    unit = unit_lines(render("sglang.service.j2", sglang_server_instance=instance, sglang_api_key="k"))
    assert unit["EnvironmentFile"] == instance["files"]["environment"]


def test_without_an_api_key_no_config_file_is_named(plan: Plan) -> None:
    instance = plan("ct129")["instances"][0]
    argv = shlex.split(unit_lines(render("sglang.service.j2", sglang_server_instance=instance))["ExecStart"])
    assert "--config" not in argv and instance["config_file"] is None


def test_the_secrets_dir_follows_the_server_config_dir(plan: Plan) -> None:
    instance = plan("b200", sglang_api_key="k", sglang_server_config_dir="/srv/fleet")["instances"][0]
    assert instance["argv"][-2:] == ["--config", "/srv/fleet/secrets/sglang-30000.yaml"]


def test_a_control_character_in_a_server_variable_would_inject_a_unit_line_and_is_refused(plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_text_problems

    instance = plan("b200")["instances"][0]
    injected = "/srv/cache\nExecStartPre=/bin/sh -c id"
    text = render("sglang.service.j2", sglang_server_instance=instance, sglang_server_read_write_paths=[injected])
    assert "\nExecStartPre=/bin/sh -c id" in text, "what preflight must keep from being written"
    variables = {
        "sglang_server_user": "sglang",
        "sglang_server_group": "sg\tlang",
        "sglang_server_home": "/var/lib/sglang\x7f",
        "sglang_server_extra_groups": ["video"],
        "sglang_server_config_dir": "/etc/sglang-fleet",
        "sglang_server_read_write_paths": [injected],
        "sglang_server_nvidia_modprobe": "/usr/bin/nvidia-modprobe",
        "sglang_api_key": "sk-\nsecret",
    }
    problems = systemd_text_problems("b200", variables, ["sglang_server_read_write_paths"])
    assert [p.split("=", 1)[0] for p in problems] == [
        "b200 host: sglang_server_group",
        "b200 host: sglang_server_home",
        "b200 host: sglang_server_read_write_paths",
        "b200 host: sglang_api_key",
    ]
    assert all("control character" in p and "; fix: " in p and "\n" not in p for p in problems)
    assert "secret" not in problems[-1], "the key is never shown"


def test_a_newline_in_the_venv_root_is_refused_by_the_plan_and_never_reaches_a_unit_line(plan: Plan) -> None:
    """Issue 38, finding 7: the venv's Python was interpolated unquoted into ExecStartPre=+ (run as root)."""
    injected = "/opt/sglang\nExecStartPre=+/bin/sh -c id"
    result = plan("b200", sglang_venv_root=injected)
    assert result["instances"] == [], "nothing with a control character reaches a template"
    assert any(
        p.startswith('b200 host: sglang_venv_root="/opt/sglang\\nExecStartPre=+/bin/sh -c id": contains the control character')
        and "; fix: " in p
        for p in result["problems"]
    ), result["problems"]
    # And were it rendered anyway, the unit's command lines refuse it instead of writing a line of its own.
    instance = plan("b200")["instances"][0]
    runtime = {"python": f"{injected}/sglang-0.5.23/bin/python", "module": "sglang.launch_server"}
    with pytest.raises(ValueError, match="control character U\\+000A"):
        render("sglang.service.j2", sglang_server_instance=instance, sglang_runtime=runtime)


def test_the_root_start_check_quotes_every_path(plan: Plan) -> None:
    instance = plan("b200")["instances"][0]
    runtime = {"python": "/opt/sg lang/sglang-0.5.23/bin/python", "module": "sglang.launch_server"}
    unit = unit_lines(render("sglang.service.j2", sglang_server_instance=instance, sglang_runtime=runtime))
    pre = unit["ExecStartPre"]
    assert pre.startswith("+")
    argv = shlex.split(pre[1:])
    assert argv[3:5] == ["/opt/sg lang/sglang-0.5.23/bin/python", "-I"], "a path with a space stays one word"
    assert argv[:3] == ["/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]


def test_a_control_character_in_cuda_home_or_the_runtime_environment_is_refused_by_the_plan(plan: Plan) -> None:
    problems = plan("b200", cuda_home="/usr/local/cuda\n", sglang_venv_runtime_environment={"A": "1\nB=2"})["problems"]
    assert any(p.startswith('b200 host: cuda_home="/usr/local/cuda\\n": contains the control character') for p in problems)
    assert any(p.startswith("b200 host: sglang_venv_runtime_environment.A=") for p in problems), problems


def test_a_read_write_path_with_a_space_is_refused() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_text_problems

    variables = {"sglang_server_read_write_paths": ["/srv/ok", "/srv/model cache"], "sglang_server_home": "/var/lib/sg lang"}
    (problem,) = systemd_text_problems("ct129", variables, ["sglang_server_read_write_paths"])
    assert problem.startswith("ct129 host: sglang_server_read_write_paths=")
    assert 'entry "/srv/model cache" contains whitespace' in problem and "; fix: " in problem


def test_a_control_character_in_a_router_variable_is_refused() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_text_problems

    problems = systemd_text_problems(
        "b200",
        {
            "sglang_router_host": "127.0.0.1",
            "sglang_router_policy": "cache_aware",
            "sglang_router_log_level": "warn\n",
            "sglang_router_extra_args": {"request-timeout-secs\r": 30, "worker-startup-timeout-secs": "1\n2"},
        },
        where="router",
    )
    assert len(problems) == 2
    assert problems[0].startswith('b200 router: sglang_router_log_level="warn\\n": contains the control character U+000A')
    assert problems[1].startswith("b200 router: sglang_router_extra_args=")


def test_a_router_extra_arg_named_as_a_secret_is_never_shown() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_text_problems

    (problem,) = systemd_text_problems("b200", {"sglang_router_extra_args": {"api-keys": "sk-router\n"}}, where="router")
    assert problem.startswith('b200 router: sglang_router_extra_args="<hidden>": contains the control character')
    assert "sk-router" not in problem


def test_the_simulator_runtime_starts_through_the_same_launcher(plan: Plan) -> None:
    instance = plan("b200")["instances"][0]
    text = render("sglang.service.j2", sglang_server_instance=instance, sglang_venv_runtime="simulator")
    argv = shlex.split(unit_lines(text)["ExecStart"])
    assert argv[:4] == [*LAUNCHER, "sglang_simulator"] and argv[4:] == instance["argv"]


def test_the_launchers_are_installed_where_the_units_run_them() -> None:
    server_tasks = yaml.safe_load((SERVER / "tasks/reconfigure.yml").read_text())
    server_vars = yaml.safe_load((SERVER / "vars/main.yml").read_text())
    router_tasks = yaml.safe_load((ROUTER / "tasks/main.yml").read_text())
    writer_name = "sglang.fleet.sglang_instance_files"
    # The server's helpers are written with its instance files, by one task; the router's launcher with its unit.
    [writer] = [task[writer_name] for task in server_tasks if writer_name in task]
    assert writer["files"] == "{{ _sglang_server_files }}"
    assert server_vars["_sglang_server_files"] == "{{ _sglang_server_helper_files + _sglang_server_tls.files }}"
    [router_writer] = [task[writer_name] for task in router_tasks if writer_name in task and not task.get("check_mode")]
    # What deploy's probe compared (the request of the router's preflight, with the launcher files) is what is written
    # (but the units tasks/before_roll.yml wrote already: test_run_state renders it).
    assert router_writer["files"].startswith("{{ sglang_router_probe.files | rejectattr('dest', 'in', _sglang_router_first")
    router_files = router_settings()["launcher_files"]
    router_preflight = (ROUTER / "tasks/preflight.yml").read_text()
    assert "sglang.fleet.sglang_router_probe_request(" in router_preflight
    copies = {item["src"]: item["dest"] for item in router_files if "src" in item and not item.get("template")}
    copies |= {item["src"]: item["dest"] for item in server_vars["_sglang_server_helper_files"] if not item.get("template")}
    assert copies["sglang_launcher.py"] == "{{ _sglang_server_helper_dir }}/sglang_launcher.py"
    assert copies["check_gpus_free.py"] == "{{ _sglang_server_helper_dir }}/check_gpus_free.py"
    assert (SERVER / "files/sglang_launcher.py").is_file()
    # The router finds the helpers' folder in the server role's published fact (sglang_service), the same folder.
    assert copies["sglang_router_launcher.py"] == "/usr/local/lib/sglang-fleet/sglang_router_launcher.py"
    assert "'service': sglang_service" in router_preflight
    server_preflight = yaml.safe_load((SERVER / "tasks/preflight.yml").read_text())
    [service] = [
        task["ansible.builtin.set_fact"]["sglang_service"]
        for task in server_preflight
        if "sglang_service" in task.get("ansible.builtin.set_fact", {})
    ]
    assert "'helper_dir': _sglang_server_helper_dir," in service
    assert (ROUTER / "files/sglang_router_launcher.py").is_file()


def render_router(process: dict[str, Any] | None = None, **variables: Any) -> str:
    """The host's router's unit, its process as the role's preflight derives it (filters sglang_router_settings and
    sglang_router_probe_request, from the role's defaults and `variables`), with `process`'s changes."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_probe_request

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROUTER / "templates"), undefined=jinja2.StrictUndefined, trim_blocks=True
    )
    environment.filters.update(CoreFilters().filters())
    environment.filters.update(collection_filters(SystemdFilters))
    environment.filters.update(collection_filters(RouterFilters))
    # The sglang_venv role's published fact: all the router's unit reads of it (and of the server role's: nothing).
    context: dict[str, Any] = {
        "ansible_managed": "Managed by Ansible",
        "sglang_runtime": {"python": "/opt/sglang/sglang-0.5.23/bin/python", "module": "sglang.launch_server"},
    }
    settings = router_settings("ct129", **{"sglang_router_enabled": True, **variables})
    instance = {"unit": "sglang-30000.service", "url": "http://127.0.0.1:30000", "served_model_name": "q", "port": 30000}
    request = sglang_router_probe_request(settings, "ct129", {
        "role_path": str(ROUTER), "instances": [instance], "hostvars": {}, "server_hosts": ["ct129"]})  # fmt: skip
    [router] = [entry for entry in request["decide"]["processes"] if entry["kind"] == "router"]
    context["sglang_router_process"] = {**router, **(process or {})}
    return environment.get_template("sglang-router.service.j2").render(**context)


@pytest.mark.parametrize("api_key", ["", "sk-router-client-key"])
def test_the_router_takes_its_keys_from_its_launcher_never_from_its_command_line_or_environment(api_key: str) -> None:
    admin_key = "RouterAdminKey0123456789"
    text = render_router(sglang_api_key=api_key, sglang_router_admin_key=admin_key)
    assert admin_key not in text and (not api_key or api_key not in text)
    unit = unit_lines(text)
    assert "EnvironmentFile" not in unit and "SGLANG_API_KEY" not in text and "--api-key" not in text
    argv = shlex.split(unit["ExecStart"])
    assert argv == [
        "/opt/sglang/sglang-0.5.23/bin/python",
        "-I",
        "/usr/local/lib/sglang-fleet/sglang_router_launcher.py",
        "/etc/sglang-router/router.json",
        "--host",
        "127.0.0.1",
        "--port",
        "30100",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        "29000",
        "--policy",
        "cache_aware",
        "--health-check-interval-secs",
        "5",
        "--log-level",
        "warn",
    ]
    assert unit["Environment"] == "SGLANG_FLEET_WORKERS_FILE=/var/lib/sglang-router/router-workers.json"
    assert "Environment=SGLANG_FLEET_ROUTER_URL=http://127.0.0.1:30100" in text.splitlines()
    assert "TIKTOKEN_ENCODINGS_BASE" not in text and "--enable-igw" not in text, "one model: sglang-router's regular mode"


def test_the_router_runs_as_its_own_account_that_can_write_nothing() -> None:
    """Issue 38, finding 8: not root, not the servers' account (a compromised worker reads none of its keys)."""
    unit = unit_lines(render_router())
    assert (unit["User"], unit["Group"]) == ("sglang-router", "sglang-router")
    assert unit["WorkingDirectory"] == "/var/lib/sglang-router"
    assert unit["ReadWritePaths"] == "" and unit["ProtectSystem"] == "strict", "its files are root's: it only reads them"
    account = router_settings(sglang_router_user="gw")["account"]
    assert account["user"] == account["group"] == "gw"
    defaults = yaml.safe_load((ROUTER / "defaults/main.yml").read_text())
    assert defaults["sglang_router_user"] not in ("root", "sglang")
    # It reaches the unit's User= line: preflight refuses a control character in it (a newline would add unit lines).
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_checks

    checks = sglang_router_checks(router_settings(sglang_router_user="gw\n"), "ct129", {
        "hostvars": {}, "server_hosts": ["ct129"], "play_hosts": ["ct129"]})  # fmt: skip
    assert any(line.startswith('ct129 router: sglang_router_user="gw\\n": contains the control character') for line in checks)


def test_a_gateway_over_tls_names_its_ca_to_its_launcher_and_its_certificate_to_smg() -> None:
    """Issue 38: the launcher registers the gateway's workers over https, verified with the fleet's CA."""
    tls = [
        "--tls-cert-path",
        "/etc/sglang-fleet/secrets/gateway-tls.pem",
        "--tls-key-path",
        "/etc/sglang-fleet/secrets/gateway-tls.key",
    ]
    text = render_router(
        {
            "unit": "sglang-gateway.service",
            "keys_file": "/etc/sglang-fleet/secrets/gateway.json",
            "url": "https://127.0.0.1:30200",
            "argv": ["--host", "0.0.0.0", "--port", "30200", *tls],
            "ca_file": "/etc/sglang-fleet/secrets/gateway-ca.pem",
        }
    )
    lines = text.splitlines()
    assert "Environment=SGLANG_FLEET_CA_FILE=/etc/sglang-fleet/secrets/gateway-ca.pem" in lines
    assert "Environment=SGLANG_FLEET_ROUTER_URL=https://127.0.0.1:30200" in lines
    assert shlex.split(unit_lines(text)["ExecStart"])[8:12] == tls
    assert "SGLANG_FLEET_CA_FILE" not in render_router(), "no CA: the system's"


def test_a_gateway_in_front_of_several_models_reads_its_vocabulary_from_the_file_the_role_sends() -> None:
    text = render_router(
        {
            "unit": "sglang-gateway.service",
            "keys_file": "/etc/sglang-fleet/secrets/gateway.json",
            "after": [],
            "argv": ["--host", "0.0.0.0", "--port", "30200"],
            "workers_file": "/var/lib/sglang/gateway-workers.json",
            "by_model": True,
        }
    )
    unit = unit_lines(text)
    assert "Environment=TIKTOKEN_ENCODINGS_BASE=/usr/local/lib/sglang-fleet" in text.splitlines()
    assert unit["SyslogIdentifier"] == "sglang-gateway" and unit["After"] == "network-online.target"
    assert "Environment=SGLANG_FLEET_WORKERS_FILE=/var/lib/sglang/gateway-workers.json" in text.splitlines()
    assert shlex.split(unit["ExecStart"])[3:] == ["/etc/sglang-fleet/secrets/gateway.json", "--host", "0.0.0.0", "--port",
                                                  "30200", "--enable-igw", "--policy", "cache_aware",
                                                  "--health-check-interval-secs", "5", "--log-level", "warn"]  # fmt: skip
    assert router_settings()["vocabulary"]["dest"] == "/usr/local/lib/sglang-fleet/o200k_base.tiktoken"


def test_power_of_two_runs_the_router_in_its_multi_model_mode() -> None:
    """smg 1.13.0 (like sglang-router 0.3.2) refuses power_of_two in its single-pool mode without workers on its
    command line ("Power-of-two policy requires at least 2 workers"); the fleet registers them after the start."""

    def argv(policy: str) -> list[str]:
        return shlex.split(unit_lines(render_router(sglang_router_policy=policy))["ExecStart"])

    assert argv("power_of_two")[-7:] == ["--enable-igw", "--policy", "power_of_two", "--health-check-interval-secs", "5",
                                         "--log-level", "warn"]  # fmt: skip
    assert "--enable-igw" not in argv("round_robin")


def test_instances_and_router_run_in_the_same_sandbox_and_the_router_sees_no_device(plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import HARDENING

    [instance] = plan("b200", sglang_instance_count=1)["instances"]
    server = render("sglang.service.j2", sglang_server_instance=instance).splitlines()
    router = render_router().splitlines()
    shared = [line.split("=", 1)[0] for line in HARDENING]
    for text in (server, router):
        keys = [line.split("=", 1)[0] for line in text if line.split("=", 1)[0] in shared]
        assert keys == shared, "every hardening line, once, in the shared order"
    assert "PrivateDevices=yes" in router and "PrivateDevices=yes" not in server
    assert any(line.startswith("DeviceAllow=/dev/nvidia") for line in server)
    assert "ReadWritePaths=" in router, "the router writes nothing: its files are root's, which it only reads"


def test_every_server_text_variable_a_template_renders_is_checked_for_control_characters() -> None:
    """The server role's preflight checks (tasks/checks.yml) each text default that reaches a unit, environment or
    sandbox line."""
    defaults = yaml.safe_load((SERVER / "defaults/main.yml").read_text())
    rendered = "".join(path.read_text() for path in (SERVER / "templates").glob("*.j2")) + (SERVER / "vars/main.yml").read_text()
    texts = {name for name, value in defaults.items() if isinstance(value, (str, list)) and name in rendered}
    tasks = yaml.safe_load((SERVER / "tasks/checks.yml").read_text())
    (problems,) = [
        task["ansible.builtin.set_fact"]["sglang_server_preflight_problems"]
        for task in tasks
        if "sglang_server_preflight_problems" in task.get("ansible.builtin.set_fact", {})
    ]
    # The filter's dict of each variable by its name (a literal in the expression: no template per variable).
    (variables,) = re.findall(r"systemd_text_problems\(\{(.*?)\}", problems, re.DOTALL)
    checked = {name for name, value in re.findall(r"'(\w+)': (\w+)", variables) if name == value}
    # The instances' TLS files are control-node paths the filter sglang_server_tls checks (module_utils/tls.py:
    # given_path, tests/unit/test_server_tls.py); no unit line renders them, only the installed paths.
    checked |= {"sglang_server_tls_cert", "sglang_server_tls_key", "sglang_server_tls_ca"}
    assert "_sglang_server_tls.problems" in problems
    assert texts and texts <= checked, texts - checked
    assert "sglang_api_key" in checked, "shown as <hidden>"


def test_the_api_key_file_is_root_s_and_only_the_servers_group_reads_it() -> None:
    """The servers' account (whose process may run a model's code) reads its key but can neither replace the file nor
    widen its mode: root owns it and its folder, the group reads it, nobody else does."""
    templates = yaml.safe_load((SERVER / "vars/main.yml").read_text())["_sglang_server_instance_templates"]
    [secret] = [entry for entry in templates if entry["file"] == "secret"]
    assert (secret["owner"], secret["group"], secret["mode"], secret["private"]) == (
        "root",
        "{{ sglang_server_group }}",
        "0640",
        True,
    )
    [folder] = [task for task in yaml.safe_load((SERVER / "tasks/account.yml").read_text()) if "API key" in task["name"]]
    assert folder["ansible.builtin.file"]["owner"] == "root" and int(folder["ansible.builtin.file"]["mode"], 8) & 0o022 == 0


@pytest.mark.parametrize(
    ("kind", "serving", "metrics"), [("router", "sglang_router", "29000"), ("gateway", "sglang_gateway", "29200")]
)
def test_the_metrics_exporter_binds_its_own_address_and_by_default_the_clients_one(kind: str, serving: str, metrics: str) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes

    defaults = yaml.safe_load((ROUTER / "defaults/main.yml").read_text())
    assert defaults[f"{serving}_prometheus_host"] == f"{{{{ {serving}_host }}}}", "by default the clients' address"
    assert str(defaults[f"{serving}_prometheus_port"]) == metrics
    preflight = (ROUTER / "tasks/preflight.yml").read_text()
    key = {"router": "prometheus_host", "gateway": "gateway_prometheus_host"}[kind]
    assert f"'{key}': {serving}_prometheus_host" in preflight

    def spec(enabled: bool) -> dict[str, Any]:
        return {"enabled": enabled, "unit": "u", "url": "http://0.0.0.0:1", "host": "0.0.0.0", "port": 1,
                "prometheus_host": "10.9.8.7", "prometheus_port": int(metrics), "keys_file": "k",
                "workers_file": "w"}  # fmt: skip

    settings = {"router": spec(kind == "router"), "gateway": spec(kind == "gateway")}
    [process] = [entry for entry in sglang_router_processes([], settings) if entry["kind"] == kind]
    assert process["argv"][:2] == ["--host", "0.0.0.0"], "clients still reach the serving address"
    assert process["argv"][process["argv"].index("--prometheus-host") :] == [
        "--prometheus-host", "10.9.8.7", "--prometheus-port", metrics,
    ]  # fmt: skip


def test_every_instance_keeps_its_kernel_caches_in_the_persistent_cache_dir(plan: Plan) -> None:
    """Issue 42: each library's cache in its own folder of sglang_server_cache_dir, in every instance's environment,
    and the folder writable in the sandbox (ProtectSystem=strict makes /var/cache read-only otherwise)."""
    role_vars = yaml.safe_load((SERVER / "vars/main.yml").read_text())
    native = NativeEnvironment()
    native.filters.update(CoreFilters().filters())
    native.filters.update(collection_filters(RoleSettingsFilters))
    context: dict[str, Any] = {
        "sglang_server_cache_dir": "/srv/kcache",
        "sglang_server_home": "/var/lib/sglang",
        "cuda_environment": {"CUDA_HOME": "/usr/local/cuda"},
        "sglang_runtime": {"environment": {}},
    }
    base: Any = native.from_string(role_vars["_sglang_server_base_environment"]).render(**context)
    assert {
        name: base[name]
        for name in (
            "SGLANG_JIT_CACHE_DIR",
            "TVM_FFI_CACHE_DIR",
            "TRITON_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE",
            "DG_JIT_CACHE_DIR",
            "TORCHINDUCTOR_CACHE_DIR",
        )
    } == {
        "SGLANG_JIT_CACHE_DIR": "/srv/kcache/sglang-jit",
        "TVM_FFI_CACHE_DIR": "/srv/kcache/tvm-ffi",
        "TRITON_CACHE_DIR": "/srv/kcache/triton",
        "FLASHINFER_WORKSPACE_BASE": "/srv/kcache/flashinfer",
        "DG_JIT_CACHE_DIR": "/srv/kcache/deep_gemm",
        "TORCHINDUCTOR_CACHE_DIR": "/srv/kcache/inductor",
    }
    instance = plan("b200")["instances"][0]
    lines = unit_lines(render("sglang.service.j2", sglang_server_instance=instance, sglang_server_cache_dir="/srv/kcache"))
    assert lines["ReadWritePaths"].split() == ["/var/lib/sglang", "-/srv/kcache"], "'-': preflight runs before it exists"


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        ("/tmp/sglang-cache", "PrivateTmp=yes"),
        ("/var/tmp/sglang", "PrivateTmp=yes"),
        ("/home/sglang/.cache", "ProtectHome=yes"),
        ("/root/.cache", "ProtectHome=yes"),
        ("/run/sglang", "tmpfs"),
        ("/dev/shm/sglang", "tmpfs"),
    ],
)
def test_a_cache_dir_that_a_restart_or_reboot_empties_is_warned_about(path: str, cause: str) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_cache_dir_warnings

    (warning,) = sglang_cache_dir_warnings(path, "b200")
    assert warning.startswith(f"b200: sglang_server_cache_dir={path}: ") and cause in warning and "; fix: " in warning


def test_a_persistent_cache_dir_is_not_warned_about_unless_a_tmpfs_is_mounted_there() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_cache_dir_warnings

    assert sglang_cache_dir_warnings("/var/cache/sglang", "b200") == []
    assert sglang_cache_dir_warnings("/var/lib/sglang/cache", "b200") == []
    assert sglang_cache_dir_warnings("/tmpfoo/cache", "b200") == []
    (warning,) = sglang_cache_dir_warnings("/var/cache/sglang", "b200", tmpfs=["/run", "/var/cache"])
    assert "/var/cache is a tmpfs mount" in warning


@pytest.mark.parametrize(
    ("path", "variable"),
    [
        ("/var/lib/sglang/cache", "sglang_server_home"),
        ("/var/lib/sglang", "sglang_server_home"),
        ("/data/sglang-scratch/kernels/", "sglang_server_read_write_paths"),
    ],
)
def test_a_cache_dir_inside_a_folder_the_servers_account_writes_is_refused(path: str, variable: str) -> None:
    """Root creates and chowns the cache directory (account.yml, following a link there) and removes it (remove.yml):
    inside the account's home or a path it may write, the account could put a link to /etc in its place."""
    from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_cache_dir_problems

    (problem,) = sglang_cache_dir_problems(path, "b200", "/var/lib/sglang", ["/data/sglang-scratch"])
    assert problem.startswith(f'b200 host: sglang_server_cache_dir="{path}": it is inside {variable} ')
    assert "fix: a directory of its own whose parents only root writes" in problem


def test_a_cache_dir_of_its_own_is_not_refused() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.systemd import sglang_cache_dir_problems

    assert sglang_cache_dir_problems("/var/cache/sglang", "b200", "/var/lib/sglang", ["/data/x", "/"]) == []
    assert sglang_cache_dir_problems("/var/lib/sglang-cache", "b200", "/var/lib/sglang") == []


@pytest.mark.parametrize(
    ("run_tags", "skip_tags", "selected"),
    [
        (["all"], [], True),
        (["preflight", "install"], [], False),
        (["sglang_server"], [], True),
        (["run"], [], True),
        (["all"], ["sglang_server_run"], False),
        (["tagged"], [], True),
    ],
)
def test_preflight_checks_cuda_only_where_the_run_s_tags_restart_instances(
    run_tags: list[str], skip_tags: list[str], selected: bool
) -> None:
    """A `--tags preflight,install` run starts no instance: preflight's CUDA smoke check has nothing to check there."""
    role_vars = yaml.safe_load((SERVER / "vars/main.yml").read_text())
    from ansible.plugins.filter.mathstuff import FilterModule as MathFilters

    native = NativeEnvironment()
    native.filters.update(CoreFilters().filters())
    native.filters.update(MathFilters().filters())
    context = {"ansible_run_tags": run_tags, "ansible_skip_tags": skip_tags,
               "_sglang_server_run_tags": role_vars["_sglang_server_run_tags"]}  # fmt: skip
    rendered: Any = native.from_string(role_vars["_sglang_server_run_selected"]).render(**context)
    assert rendered is selected
    checks = (SERVER / "tasks/checks.yml").read_text()
    assert "_sglang_server_checks_cuda and _sglang_server_run_selected and" in checks


def test_a_host_whose_routers_ran_as_the_servers_account_loses_their_old_files() -> None:
    """Issue 38, finding 8's migration: every file an earlier release kept for the routers where the servers' account
    reads or writes (its secrets folder, its home) is removed when found; the new ones are root's, in the routers'
    folders, which the servers' account cannot enter."""
    settings = router_settings(sglang_service={"secrets_dir": "/etc/sglang-fleet/secrets", "home": "/var/lib/sglang",
                                               "helper_dir": "/usr/local/lib/sglang-fleet"})  # fmt: skip
    legacy = settings["legacy_files"]
    # What the release before this one wrote for the routers (its vars/main.yml and filter sglang_gateway_tls).
    assert set(legacy) >= {
        "/etc/sglang-fleet/secrets/router.env",
        "/etc/sglang-fleet/secrets/router.json",
        "/etc/sglang-fleet/secrets/gateway.json",
        "/etc/sglang-fleet/secrets/gateway-tls.pem",
        "/etc/sglang-fleet/secrets/gateway-tls.key",
        "/etc/sglang-fleet/secrets/gateway-ca.pem",
        "/var/lib/sglang/router-workers.json",
        "/var/lib/sglang/gateway-workers.json",
    }
    account = settings["account"]
    assert not any(path.startswith((account["config_dir"], account["state_dir"])) for path in legacy)
    # The request removes them, and the gateway's TLS files not wanted, when found.
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_probe_request

    request = sglang_router_probe_request(settings, "ct129", {"role_path": str(ROUTER), "hostvars": {}, "server_hosts": []})
    assert set(legacy + settings["tls"]["absent"]) <= set(request["read"]["globs"])
