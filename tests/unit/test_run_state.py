"""Decisions a deploy's tasks make from the results this run registered so far, in Python (plugins/filter
sglang_run_state.py, sglang_model.py's sglang_model_fanout_part, sglang_role_settings.py's sglang_venv_parsed_marker)
instead of templates in the roles' vars: each checked against the template it replaced, rendered by Ansible's own
templar (a filter of the collection it called given as its result)."""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.filter.core import get_hash, to_json
from ansible.template import Templar, trust_as_template
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import sglang_model_fanout_part
from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_parsed_marker
from ansible_collections.sglang.fleet.plugins.filter.sglang_run_state import (
    sglang_rollout_halted,
    sglang_router_bounced,
    truncated,
)
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import server_rolling, server_units
from fleet import ROOT

# The templates of roles/sglang_server/vars/main.yml these replaced (main before issue 37's last part).
OLD_CHANGED_HOST = """{{ [_sglang_server_removed_keys | default({}), _sglang_server_instance_files | default({}),
  _sglang_server_displaced | default({}), _sglang_server_rolled | default({})] | select('changed') | list | length > 0 }}"""
OLD_UNITS_NOW = """{{ _sglang_server_decision if (_sglang_server_reread | default({'skipped': true})) is skipped
  else _reread_units }}"""  # `sglang_instances | sglang.fleet.sglang_server_units(_sglang_server_reread)`: _reread_units
OLD_WOULD_ROLL = """{{ sglang_instances
  | selectattr('name', 'in', _sglang_server_instance_files.changed_instances | default([]))
  | rejectattr('unit', 'in', _sglang_server_units_now.stopped | map(attribute='unit')) }}"""
OLD_TO_ROLL = """{{ (_sglang_server_would_roll if ansible_check_mode and not sglang_server_leftovers | default(false)
  else _sglang_server_units_now.stale) | rejectattr('nodes', 'defined') | list }}"""
STARTED = "Thu 1970-01-01 00:16:40.000000 UTC"  # 1000 s


def render(template: str, **variables: Any) -> Any:
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))


def rendered(value: Any, variables: dict[str, Any]) -> Any:
    """A structure of role variables with each template string in it rendered as Ansible would (render)."""
    if isinstance(value, dict):
        return {key: rendered(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [rendered(item, variables) for item in value]
    return render(value, **variables) if isinstance(value, str) and "{{" in value else value


def instance(port: int, **more: Any) -> dict[str, Any]:
    unit = f"sglang-{port}.service"
    return {"name": f"sglang-{port}", "unit": unit, "files": {"last_good": [[f"/etc/systemd/system/{unit}", "/x"]]}, **more}


INSTANCES = [instance(30000), instance(30001), instance(30002, nodes=["h1", "h2"], group="g")]
DECISION = {"stale": [INSTANCES[0], INSTANCES[2]], "stopped": [INSTANCES[1]], "failed_units": [], "not_enabled": [],
            "unknown_units": []}  # fmt: skip
REREAD = {"changed": False, "units": {item["unit"]: {"ActiveState": "active", "UnitFileState": "enabled",
                                                     "ExecMainStartTimestamp": STARTED} for item in INSTANCES},
          "mtimes": {"/etc/systemd/system/sglang-30001.service": 2000.0}}  # fmt: skip
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
WRITTEN = {"changed": True, "changed_instances": ["sglang-30000", "sglang-30001", "sglang-30002"]}
CASES: dict[str, dict[str, Any]] = {
    "nothing ran": {},
    "skipped tasks": {"removed_keys": SKIPPED, "instance_files": SKIPPED, "displaced": SKIPPED, "reread": SKIPPED},
    "files written, not read again": {"instance_files": WRITTEN},
    "read again": {"instance_files": WRITTEN, "reread": REREAD},
    "a loop changed": {"rolled": {"changed": True, "results": [{"changed": True}]}},
    "nothing changed": {"removed_keys": {"changed": False}, "rolled": {"changed": False}, "reread": REREAD},
}


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("leftovers", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_the_servers_rolling_state_is_what_the_templates_said(case: str, check_mode: bool, leftovers: bool) -> None:
    registered = CASES[case]
    variables: dict[str, Any] = {f"_sglang_server_{name}": result for name, result in registered.items()}
    reread_units = server_units(INSTANCES, registered.get("reread") or {})
    variables |= {"sglang_instances": INSTANCES, "_sglang_server_decision": DECISION, "ansible_check_mode": check_mode,
                  "sglang_server_leftovers": leftovers, "_reread_units": reread_units}  # fmt: skip
    units = render(OLD_UNITS_NOW, **variables)
    would_roll = render(OLD_WOULD_ROLL, **variables, _sglang_server_units_now=units)
    to_roll = render(OLD_TO_ROLL, **variables, _sglang_server_units_now=units, _sglang_server_would_roll=would_roll)
    found = server_rolling(INSTANCES, DECISION, registered, check_mode, leftovers)
    assert found == {"host_changed": render(OLD_CHANGED_HOST, **variables), "units": units, "would_roll": would_roll,
                     "to_roll": to_roll}  # fmt: skip


def test_a_rollout_restarts_the_stale_instances_and_in_check_mode_those_it_would_change() -> None:
    stale = server_rolling(INSTANCES, DECISION, {}, check_mode=False)
    assert [item["name"] for item in stale["to_roll"]] == ["sglang-30000"], "stale, without the one across hosts"
    assert stale["host_changed"] is False and stale["units"] is DECISION
    check = server_rolling(INSTANCES, DECISION, {"instance_files": WRITTEN}, check_mode=True)
    assert [item["name"] for item in check["would_roll"]] == ["sglang-30000", "sglang-30002"], "not the stopped one"
    assert [item["name"] for item in check["to_roll"]] == ["sglang-30000"] and check["host_changed"] is True
    again = server_rolling(INSTANCES, DECISION, {"instance_files": WRITTEN, "reread": REREAD}, check_mode=False)
    assert [item["name"] for item in again["units"]["stale"]] == ["sglang-30001"], "as read again: its file is newer"
    assert again["units"]["stopped"] == []


OLD_BOUNCED = """{{ ((_sglang_router_restarted.results | default([])) + (_sglang_router_started.results | default([])))
  | selectattr('changed', 'defined') | selectattr('changed') | map(attribute='item.unit') | list }}"""


def test_the_routers_bounced_are_those_restarted_or_started() -> None:
    def loop(*changed: bool | None) -> dict[str, Any]:
        results = [{"item": {"unit": f"u{index}.service"}, **({} if flag is None else {"changed": flag})}
                   for index, flag in enumerate(changed)]  # fmt: skip
        return {"changed": any(changed), "results": results}

    for restarted, started in [(loop(True, False), loop(False, True)), (loop(None, True), SKIPPED), ({}, {}), (SKIPPED, loop())]:
        named = [("_sglang_router_restarted", restarted), ("_sglang_router_started", started)]
        variables = {name: value for name, value in named if value}
        assert sglang_router_bounced(restarted, started) == render(OLD_BOUNCED, **variables)
    assert sglang_router_bounced(loop(True, False), loop(False, True)) == ["u0.service", "u1.service"]


OLD_HALTED = """{% for host in ansible_play_hosts_all if (hostvars[host]._sglang_server_wave_rolled | default({})) is failed
%}{{ host }} failed: {{ hostvars[host]._sglang_server_wave_rolled.msg | truncate(300) }} {% endfor %}"""


def test_a_wave_halts_naming_every_host_that_failed_an_earlier_one() -> None:
    long = " ".join(f"word{index}" for index in range(80))
    hostvars = {
        "h1": {"_sglang_server_wave_rolled": {"failed": True, "msg": "sglang-30000 did not answer"}},
        "h2": {"_sglang_server_wave_rolled": {"changed": True}},
        "h3": {},
        "h4": {"_sglang_server_wave_rolled": {"failed": True, "msg": long}},
        "h5": {"_sglang_server_wave_rolled": {"failed": False, "msg": "fine"}},
    }
    hosts = list(hostvars)
    halted = sglang_rollout_halted(hosts, hostvars, "_sglang_server_wave_rolled")
    assert halted == render(OLD_HALTED, ansible_play_hosts_all=hosts, hostvars=hostvars)
    assert halted.startswith("h1 failed: sglang-30000 did not answer h4 failed: word0 ") and halted.endswith("... ")
    assert sglang_rollout_halted(["h2", "h3"], hostvars, "_sglang_server_wave_rolled") == ""
    for length in (0, 299, 300, 305, 306, 400):
        text = ("ab " * 200)[:length]
        assert truncated(text) == render("{{ text | truncate(300) }}", text=text), length


OLD_FANOUT = {
    "entry": "{{ _sglang_model_plan[inventory_hostname] | default({'source': 'control', 'wave': 0, 'shared': false}) }}",
    "copies": "{{ _sglang_model_plan.values() | rejectattr('source', 'eq', 'control') | rejectattr('shared') | list }}",
    "receivers": """{{ _sglang_model_plan | dict2items | rejectattr('value.source', 'eq', 'control') | rejectattr('value.shared')
                       | map(attribute='key') | list }}""",
    "waves": "{{ (_sglang_model_plan.values() | map(attribute='wave') | max | default(-1)) + 1 }}",
}
OLD_SENDERS = "{{ copies | map(attribute='source') | unique | list }}"
OLD_FROM_CONTROL = """{{ entry.source == 'control'
  or (entry.source in _sglang_model_plan and entry.source not in ansible_play_hosts) }}"""
OLD_PEER_HOST = "{{ ('[' ~ peer.address ~ ']') if ':' in peer.address else peer.address }}"
OLD_KNOWN_HOST = "{{ peer.address if peer.port | int == 22 else '[' ~ peer.address ~ ']:' ~ peer.port }}"


def test_a_host_s_part_in_the_fan_out_is_what_the_templates_said() -> None:
    plan = {
        "h1": {"wave": 0, "source": "control", "shared": False, "fallback": False},
        "h2": {"wave": 1, "source": "h1", "shared": False, "fallback": False},
        "h3": {"wave": 1, "source": "h0", "shared": False, "fallback": False},
        "h4": {"wave": 2, "source": "h2", "shared": False, "fallback": False},
        "h5": {"wave": 2, "source": "h4", "shared": True, "fallback": False},
        "h6": {"wave": 2, "source": "control", "shared": False, "fallback": True},
    }
    peers: dict[str, dict[str, Any]] = {
        "h0": {"address": "fd00::1", "port": 22, "user": "root"},
        "h1": {"address": "10.0.0.1", "port": "2222", "user": "u"},
        "h2": {"address": "fd00::2", "port": 2200, "user": "root"},
        "h4": {"address": "h4.example", "port": 22, "user": "r"},
    }
    hostvars = {host: {"sglang_model_source": {"peer": peer}} for host, peer in peers.items()}
    for host in [*plan, "h7"]:
        for active in (list(plan), ["h1", "h3", "h4"]):
            part = sglang_model_fanout_part(plan, host, active, hostvars)
            variables = {"_sglang_model_plan": plan, "inventory_hostname": host, "ansible_play_hosts": active}
            old = {name: render(template, **variables) for name, template in OLD_FANOUT.items()}
            old["senders"] = render(OLD_SENDERS, copies=old["copies"])
            old["from_control"] = render(OLD_FROM_CONTROL, entry=old["entry"], **variables)
            assert {name: part[name] for name in old} == old, (host, active)
            assert part["senders_unplanned"] == [sender for sender in old["senders"] if sender not in plan]
            if part["entry"]["source"] != "control":
                peer = peers[part["entry"]["source"]]
                assert part["peer"] == {**peer, "ssh_host": render(OLD_PEER_HOST, peer=peer),
                                        "known_host": render(OLD_KNOWN_HOST, peer=peer)}  # fmt: skip
            else:
                assert part["peer"] == {}
    empty = sglang_model_fanout_part({}, "h1", ["h1"], {})
    assert (empty["waves"], empty["copies"], empty["from_control"], empty["entry"]["source"]) == (0, [], True, "control")
    assert sglang_model_fanout_part(plan, "h2", list(plan), hostvars)["peer"]["known_host"] == "[10.0.0.1]:2222"
    assert sglang_model_fanout_part(plan, "h3", ["h3"], hostvars)["from_control"] is False, "h0 held it before the run"
    assert sglang_model_fanout_part(plan, "h4", ["h4"], hostvars)["from_control"] is True, "its peer h2 left the run"


def test_the_parsed_marker_has_the_name_the_template_gave_it() -> None:
    """The old template: `{{ venv }}/.parsed-{{ [input, checker, environment, lookup('file', 'check_server_args.py',
    rstrip=false)] | to_json | hash('sha256') }}`, with Ansible's own to_json and hash filters."""
    checker = ROOT / "roles/sglang_venv/files/check_server_args.py"
    parse_input = to_json([{"name": "sglang-30000", "argv": ["--port", "30000", "--model-path", "/m/é"]}])
    argv = ["/opt/v/bin/python", "-I", "/opt/v/check_server_args.py", "sglang_simulator.args:parse_args"]
    environment = {"SGLANG_SIM_VERSION": "0.5.23", "X": "ü"}
    digest = get_hash(to_json([parse_input, argv, environment, checker.read_text()]), "sha256")
    assert sglang_venv_parsed_marker("/opt/v", parse_input, argv, environment, str(checker)) == f"/opt/v/.parsed-{digest}"
    other = sglang_venv_parsed_marker("/opt/v", parse_input, argv, {}, str(checker))
    assert other != f"/opt/v/.parsed-{digest}", "another environment: parsed again"
    assert hashlib.sha256(json.dumps([parse_input, argv, environment, checker.read_text()]).encode()).hexdigest() == digest


# The server's request as roles/sglang_server/tasks/preflight.yml wrote it before filter sglang_server_request (main
# before issue 37's last part): a structure of templates, each string compiled whenever the fact was set.
OLD_SERVER_REQUEST = """
name: sglang_server
role_path: "{{ role_path }}"
instances: "{{ sglang_instances if sglang_preflight_problems | default([]) | length == 0 else [] }}"
templates: "{{ _sglang_server_instance_templates }}"
files: "{{ _sglang_server_helper_files }}"
read:
  accounts:
    - {name: "{{ sglang_server_user }}", group: "{{ sglang_server_group }}", groups: "{{ sglang_server_extra_groups }}",
       home: "{{ sglang_server_home }}", shell: /usr/sbin/nologin}
  paths:
    - {path: "{{ sglang_server_home }}", state: directory, owner: "{{ sglang_server_user }}",
       group: "{{ sglang_server_group }}", mode: "0750"}
    - {path: "{{ sglang_server_cache_dir }}", state: directory, owner: "{{ sglang_server_user }}",
       group: "{{ sglang_server_group }}", mode: "0750"}
    - {path: "{{ sglang_server_config_dir }}", state: directory, owner: root, group: "{{ sglang_server_group }}", mode: "0750"}
    - {path: "{{ _sglang_server_helper_dir }}", state: directory, mode: "0755"}
    - {path: "{{ sglang_server_secrets_dir }}", state: directory, owner: root, group: "{{ sglang_server_group }}", mode: "0750"}
  globs:
    - "{{ sglang_server_secrets_dir }}/sglang-*.yaml"
    - "{{ sglang_server_unit_dir }}/sglang-*.service"
    - "{{ sglang_server_nvidia_modprobe }}"
  units: "{{ _sglang_server_units + [_sglang_server_devices_unit] }}"
  unit_properties: "{{ _sglang_server_unit_properties }}"
  mtimes: "{{ _sglang_server_instance_paths }}"
decide:
  instances: "{{ sglang_instances }}"
  unit_dir: "{{ sglang_server_unit_dir }}"
  secrets_dir: "{{ sglang_server_secrets_dir }}"
  devices_unit: "{{ _sglang_server_devices_unit }}"
  displaced: "{{ (sglang_reshape | default({})).displaced | default([]) }}"
"""
OLD_UNITS = "{{ sglang_instances | map(attribute='unit') | list }}"
OLD_INSTANCE_PATHS = "{{ sglang_instances | map(attribute='files.last_good') | flatten(levels=1) | map('first') | list }}"


@pytest.mark.parametrize("problems", [[], ["ct129: a problem"]])
def test_the_server_request_is_the_structure_it_replaced(problems: list[str]) -> None:
    import re

    import yaml
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_server_request

    server = ROOT / "roles/sglang_server"
    variables: dict[str, Any] = {**yaml.safe_load((server / "defaults/main.yml").read_text())}
    variables |= {name: value for name, value in yaml.safe_load((server / "vars/main.yml").read_text()).items()
                  if not (isinstance(value, str) and "{{" in value)}  # fmt: skip
    variables |= {"role_path": str(server), "sglang_server_secrets_dir": "/etc/sglang-fleet/secrets",
                  "_sglang_server_instance_templates": [{"src": "sglang.service.j2", "group": "sglang"}],
                  "_sglang_server_helper_files": [{"src": "sglang_launcher.py", "dest": "/usr/local/lib/x"}],
                  "sglang_instances": INSTANCES, "sglang_preflight_problems": problems,
                  "sglang_reshape": {"displaced": ["sglang-30001.service"]}}  # fmt: skip
    variables |= {"_sglang_server_units": render(OLD_UNITS, **variables),
                  "_sglang_server_instance_paths": render(OLD_INSTANCE_PATHS, **variables)}  # fmt: skip
    before = rendered(yaml.safe_load(OLD_SERVER_REQUEST), variables)
    settings = {
        "role_path": variables["role_path"], "write": not problems,
        "templates": variables["_sglang_server_instance_templates"], "files": variables["_sglang_server_helper_files"],
        "user": variables["sglang_server_user"], "group": variables["sglang_server_group"],
        "extra_groups": variables["sglang_server_extra_groups"], "home": variables["sglang_server_home"],
        "cache_dir": variables["sglang_server_cache_dir"], "config_dir": variables["sglang_server_config_dir"],
        "helper_dir": variables["_sglang_server_helper_dir"], "secrets_dir": variables["sglang_server_secrets_dir"],
        "unit_dir": variables["sglang_server_unit_dir"], "nvidia_modprobe": variables["sglang_server_nvidia_modprobe"],
        "devices_unit": variables["_sglang_server_devices_unit"], "unit_properties": variables["_sglang_server_unit_properties"],
        "displaced": ["sglang-30001.service"], "tls_absent": [],
    }  # fmt: skip
    # Since the structure: the instances' TLS files no longer wanted (none here), removed with the unwanted keys.
    before["decide"]["tls_absent"] = []
    assert sglang_server_request(INSTANCES, settings) == before
    assert (before["instances"] == []) == bool(problems)
    # The role's task passes every one of these settings, each from the variable the structure read.
    task = (server / "tasks/preflight.yml").read_text()
    call = task[task.index("sglang.fleet.sglang_server_request(") :]
    assert set(re.findall(r"'(\w+)':", call)) == set(settings)


def venv_settings(tmp_path: Any, **overrides: Any) -> dict[str, Any]:
    return {
        "runtimes": ["sglang", "simulator"], "root": "/opt/sglang", "path": "/opt/sglang/simulator-0.5.23",
        "version": "0.5.23", "keep_previous": 1, "checker": "/opt/sglang/simulator-0.5.23/check_server_args.py",
        "marker": "/opt/sglang/simulator-0.5.23/.parsed-abc", "os_packages": ["python3-venv"], "python_installs": False,
        "python_minor": "3.12", "packages": ["smg==1.13.0"], "pins_file": "",
        "simulator_dir": "/opt/sglang/simulator-0.5.23/simulator/s-1",
        "files_dir": str(ROOT / "roles/sglang_venv/files"),
        "room": {"archive": "/var/cache/wh/sglang-0.5.23.tar", "unpacked": "/var/cache/wh/sglang-0.5.23/.unpacked-*"},
        "host_wheelhouse": "/var/cache/wh", **overrides,
    }  # fmt: skip


def test_the_venv_request_reads_what_the_structures_it_replaced_read(tmp_path: Any) -> None:
    """The request roles/sglang_venv/tasks/preflight.yml built from _sglang_venv_installed_packages, _pins, _paths,
    _files and _commands (main before issue 37's last part), for each runtime."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import VENV_SGLANG_CHECK, sglang_venv_request

    files = ROOT / "roles/sglang_venv/files"
    common_paths = [
        {"path": "/opt/sglang", "state": "directory", "mode": "0755"},
        {"path": "/opt/sglang/simulator-0.5.23/check_server_args.py", "state": "file", "mode": "0644",
         "content": (files / "check_server_args.py").read_text()},
        {"path": "/opt/sglang/simulator-0.5.23/cuda_smoke_check.py", "state": "file", "mode": "0644",
         "content": (files / "cuda_smoke_check.py").read_text()},
    ]  # fmt: skip
    decide = {"venv": "/opt/sglang/simulator-0.5.23", "venvs": "/opt/sglang/simulator-*", "keep_previous": 1,
              "checker": "/opt/sglang/simulator-0.5.23/check_server_args.py"}  # fmt: skip
    simulator = sglang_venv_request("simulator", venv_settings(tmp_path))
    python = "/opt/sglang/simulator-0.5.23/bin/python"
    assert simulator == {
        "name": "sglang_venv",
        "read": {
            "packages": {"python3-venv": ""},
            "venvs": [{"path": "/opt/sglang/simulator-0.5.23", "pins": ["smg==1.13.0"]}],
            "paths": [
                {"path": "/opt/sglang/simulator-0.5.23/simulator/s-1/sglang_simulator/__init__.py", "state": "file"},
                {"path": "/opt/sglang/simulator-0.5.23/lib/python3.12/site-packages/sglang_simulator.pth", "state": "file",
                 "mode": "0644", "content": "/opt/sglang/simulator-0.5.23/simulator/s-1\n"},
                *common_paths,
            ],
            "commands": [{"argv": [python, "-c", "from sglang_simulator.facts import load_facts, release; "
                                   "print(load_facts(release()).sglang_version)"],
                          "environment": {"SGLANG_SIM_VERSION": "0.5.23"}, "stdout": "0.5.23"}],
            "globs": ["/opt/sglang/simulator-*", "/opt/sglang/simulator-0.5.23/check_server_args.py",
                      "/opt/sglang/simulator-0.5.23/.parsed-abc", "/var/cache/wh/sglang-0.5.23.tar",
                      "/var/cache/wh/sglang-0.5.23/.unpacked-*"],
            "free_space": ["/opt/sglang", "/var/cache/wh"],
        },
        "decide": decide,
    }  # fmt: skip
    pins = tmp_path / "requirements-hashed.txt"
    pins.write_text("sglang==0.5.23 --hash=sha256:aa\nsmg==1.13.0 --hash=sha256:bb\ntorch==2.9.1 --hash=sha256:cc\n")
    top = ["sglang==0.5.23", "smg==1.13.0"]
    sglang = sglang_venv_request("sglang", venv_settings(tmp_path, packages=top, pins_file=str(pins), simulator_dir="",
                                                         python_installs=True, os_packages=[]))  # fmt: skip
    assert sglang["read"]["packages"] == {"python3.11": "", "python3.11-venv": ""}, "python3.11 installed to build it"
    assert sglang["read"]["venvs"][0]["pins"] == ["sglang==0.5.23", "smg==1.13.0", "torch==2.9.1"], "every wheel pinned"
    assert sglang["read"]["paths"] == common_paths
    assert sglang["read"]["commands"] == [{"argv": [python, "-I", "-c", VENV_SGLANG_CHECK], "stdout": "0.5.23"}]
    fallback = sglang_venv_request("sglang", venv_settings(tmp_path, packages=top, pins_file=str(tmp_path / "absent")))
    assert fallback["read"]["venvs"][0]["pins"] == top, "no wheelhouse here yet: the top-level pins"
    unknown = sglang_venv_request("conda", venv_settings(tmp_path))
    assert unknown == {"name": "sglang_venv", "read": {}, "decide": {**decide, "venvs": "/opt/sglang/conda-*"}}


def test_the_venv_check_finds_the_pinned_sglang_without_importing_it(tmp_path: Any) -> None:
    """The sglang runtime's probe command (filter sglang_venv_request) runs the venv's interpreter and reads SGLang's
    version from its metadata: a package whose import would fail still answers, so no host imports torch on a run that
    changes nothing. Another version, a second distribution (an upgrade cut short), a file of its record missing or
    no package at all differs (the install step then runs, and checks the import)."""
    import subprocess
    import sys

    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_venv_request
    from ansible_collections.sglang.fleet.plugins.module_utils import installed

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    (info / "RECORD").write_text("sglang/__init__.py,,\nsglang/srt/server.py,,\nsglang/__pycache__/x.pyc,,\n")
    (site / "sglang/srt").mkdir(parents=True)
    (site / "sglang/__init__.py").write_text("raise SystemExit('imported')\n")
    (site / "sglang/srt/server.py").write_text("")
    request = sglang_venv_request("sglang", venv_settings(tmp_path, path=str(venv), pins_file=str(tmp_path / "absent")))
    (command,) = request["read"]["commands"]

    def printed() -> list[str]:
        return installed.differences({"commands": [command]})

    assert printed() == [], "found without importing it, bytecode not needed"
    (site / "sglang/srt/server.py").unlink()
    assert printed()[0].endswith("printed '1 sglang distribution(s), 1 of its files missing', not '0.5.23'")
    (site / "sglang/srt/server.py").write_text("")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.22\n")
    assert printed()[0].endswith("printed '0.5.22', not '0.5.23'")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    shutil.copytree(info, site / "sglang-0.5.22.dist-info")
    assert printed()[0].endswith("printed '2 sglang distribution(s), 0 of its files missing', not '0.5.23'")
    shutil.rmtree(site / "sglang-0.5.22.dist-info")
    shutil.rmtree(site / "sglang")
    assert printed()[0].endswith("printed '1 sglang distribution(s), 2 of its files missing', not '0.5.23'")

# CUDA's request as roles/cuda/tasks/preflight.yml and vars/main.yml built it before filter cuda_request (main before
# issue 37's last part).
OLD_CUDA_VARS = """
_cuda_installed_packages:
  apt: "{{ {cuda_apt_package: cuda_apt_version} }}"
  wheels: "{{ dict(cuda_wheels_os_packages | product([''])) if ansible_facts.os_family == 'Debian' else {} }}"
  none: {}
_cuda_installed_venvs:
  apt: []
  wheels: [{path: "{{ cuda_wheels_prefix }}", pins: "{{ cuda_wheels }}"}]
  none: []
_cuda_installed_paths:
  apt:
    - {path: "{{ _cuda_apt_keyring }}", state: file}
    - {path: "{{ cuda_home }}", state: link, src: "/usr/local/cuda-{{ cuda_version }}"}
  wheels:
    - {path: "{{ cuda_home }}", state: link, src: "{{ _cuda_wheels_home }}"}
  none: []
"""
OLD_CUDA_REQUEST = """
name: cuda
role_path: "{{ role_path }}"
files: "{{ _cuda_apt_files if cuda_install_method == 'apt' else [] }}"
read:
  packages: "{{ _cuda_installed_packages[cuda_install_method] | default({}) }}"
  venvs: "{{ _cuda_installed_venvs[cuda_install_method] | default([]) }}"
  paths: "{{ _cuda_installed_paths[cuda_install_method] | default([]) }}"
  commands: [{argv: ["{{ cuda_home }}/bin/nvcc", --version]}]
decide: {}
"""


@pytest.mark.parametrize("method", ["apt", "wheels", "none", "conda"])
@pytest.mark.parametrize("family", ["Debian", "RedHat"])
def test_the_cuda_request_is_the_structure_it_replaced(method: str, family: str) -> None:
    import yaml
    from ansible_collections.sglang.fleet.plugins.filter.cuda import cuda_request

    cuda = ROOT / "roles/cuda"
    variables: dict[str, Any] = {name: value for name, value in yaml.safe_load((cuda / "defaults/main.yml").read_text()).items()
                                 if not (isinstance(value, str) and "{{" in value)}  # fmt: skip
    role_vars = yaml.safe_load((cuda / "vars/main.yml").read_text())
    variables |= {"role_path": str(cuda), "cuda_install_method": method, "ansible_facts": {"os_family": family},
                  "_cuda_apt_files": role_vars["_cuda_apt_files"], "_cuda_apt_keyring": role_vars["_cuda_apt_keyring"],
                  "cuda_apt_package": "cuda-toolkit-13-0", "cuda_wheels_prefix": "/opt/cuda-13.0",
                  "_cuda_wheels_home": "/opt/cuda-13.0/lib/python3.12/site-packages/nvidia/cu13"}  # fmt: skip
    variables |= {name: rendered(value, variables) for name, value in yaml.safe_load(OLD_CUDA_VARS).items()}
    before = rendered(yaml.safe_load(OLD_CUDA_REQUEST), variables)
    settings = {
        "role_path": str(cuda), "home": variables["cuda_home"], "version": variables["cuda_version"],
        "apt_files": variables["_cuda_apt_files"] if method == "apt" else [],
        "apt_package": variables["cuda_apt_package"], "apt_version": variables["cuda_apt_version"],
        "apt_keyring": variables["_cuda_apt_keyring"], "wheels_os_packages": variables["cuda_wheels_os_packages"],
        "debian": family == "Debian", "wheels": variables["cuda_wheels"], "wheels_prefix": variables["cuda_wheels_prefix"],
        "wheels_home": variables["_cuda_wheels_home"],
    }  # fmt: skip
    assert cuda_request(method, settings) == before
    task = (cuda / "tasks/preflight.yml").read_text()
    call = task[task.index("sglang.fleet.cuda_request(") : task.index("cuda_preflight_problems")]
    assert {name for name in settings if f"'{name}':" in call} == set(settings)


def test_the_routers_restarted_before_the_rollout_get_their_unit_but_not_their_keys() -> None:
    """roles/sglang_router/tasks/before_roll.yml writes, of the router role's files, only the units of the routers that
    restart before the instances roll: their keys file, which the rollout reads as the running router's, and the shared
    launcher (whose change restarts every router of the host) are written after the rollout (tasks/main.yml), the
    gateway's unit too where the gateway does not restart."""
    [write] = [task for task in yaml.safe_load((ROOT / "roles/sglang_router/tasks/before_roll.yml").read_text())
               if "sglang.fleet.sglang_instance_files" in task]  # fmt: skip
    files: list[dict[str, Any]] = [
        {"dest": "/usr/local/lib/sglang-fleet/sglang_router_launcher.py"},
        {"dest": "/etc/systemd/system/sglang-router.service"},
        {"dest": "/etc/sglang-router/router.json", "private": True},
        {"dest": "/etc/systemd/system/sglang-gateway.service"},
        {"dest": "/etc/sglang-router/gateway.json", "private": True},
    ]
    variables: dict[str, Any] = {
        "sglang_router_probe": {"files": files},
        "_sglang_router_first": [
            {"unit": "sglang-router.service", "unit_path": files[1]["dest"], "keys_file": "/etc/sglang-router/router.json",
             "tls_files": [], "ca_file": ""}
        ],
        "_sglang_router_decision": {"account": []},
    }  # fmt: skip
    written = render(write["sglang.fleet.sglang_instance_files"]["files"], **variables)
    assert [file["dest"] for file in written] == [files[1]["dest"]]
    # A gateway that restarts first and turns to https in the same run: its certificate and key with its unit (it would
    # not start without them) and the fleet's CA (it is waited for over https), not its keys file.
    tls = [
        "/etc/sglang-router/gateway-tls.pem",
        "/etc/sglang-router/gateway-tls.key",
        "/usr/local/lib/sglang-fleet/gateway-ca.pem",
    ]
    gateway = {"unit": "sglang-gateway.service", "unit_path": files[3]["dest"], "keys_file": files[4]["dest"],
               "tls_files": tls[:2], "ca_file": tls[2]}  # fmt: skip
    turning = {**variables, "sglang_router_probe": {"files": [*files, *({"dest": path} for path in tls)]},
               "_sglang_router_first": [gateway]}  # fmt: skip
    turned = render(write["sglang.fleet.sglang_instance_files"]["files"], **turning)
    assert [file["dest"] for file in turned] == [files[3]["dest"], *tls]
    # Routers that move to their own account in this run: their keys file at its new place too (no file there yet).
    moving = {**variables, "_sglang_router_decision": {"account": ["the routers' account: to create"]}}
    moved = render(write["sglang.fleet.sglang_instance_files"]["files"], **moving)
    assert [file["dest"] for file in moved] == [files[1]["dest"], files[2]["dest"]]
    # tasks/main.yml then writes the rest, but what before_roll changed (its diff and its restart said once).
    [later] = [task for task in yaml.safe_load((ROOT / "roles/sglang_router/tasks/main.yml").read_text())
               if "sglang.fleet.sglang_instance_files" in task]  # fmt: skip
    rest = later["sglang.fleet.sglang_instance_files"]["files"]
    first_written = {"changed": True, "changed_paths": [files[1]["dest"]]}
    assert render(rest, **variables, _sglang_router_first_written=first_written) == [files[0], *files[2:]]
    assert render(rest, **variables, _sglang_router_first_written={"skipped": True}) == files
    assert render(rest, **variables) == files, "before_roll not run (--tags): every file"
