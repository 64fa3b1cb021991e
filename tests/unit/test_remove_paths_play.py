"""playbooks/remove.yml reaches the files deploy wrote where the roles define them (issue 38): the gateway's keys file
and the fleet's CA it verifies the gateway with, and the router's keys file, from role sglang_router's vars and its
filter sglang_gateway_tls in role sglang_server's helpers' folder - no second copy of a path. Its own templates run by
ansible-playbook on this machine (local connection) in a play that imports the roles as remove.yml does, with the
helpers' folder moved: remove.yml follows it to where deploy (sglang_service, as the server role publishes it) puts
the CA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import ROOT, local_play

GATEWAY_TASK = "Take the host's instances out of every fleet gateway"
ROUTER_TASK = "Take the host's instances out of its router, let them finish their requests, and stop them"


def remove_task(name: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROOT / "playbooks/remove.yml").read_text())[0]["tasks"]
    [task] = [task for task in tasks if task.get("name") == name]
    arguments: dict[str, Any] = task["sglang.fleet.sglang_rollout"]
    return arguments


def test_remove_takes_the_gateway_ca_and_keys_files_from_the_roles_definitions(tmp_path: Path) -> None:
    [gateway] = remove_task(GATEWAY_TASK)["gateways"]
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    found = {
        "remove": {"ca_file": gateway["ca_file"], "keys_file": gateway["keys_file"],
                   "router_keys_file": remove_task(ROUTER_TASK)["router_keys_file"]},
        # What deploy writes: the role's TLS files (with sglang_service as the server role's preflight publishes it)
        # and its keys files.
        "deploy": {"ca_file": "{{ _sglang_router_tls.ca_file }}", "keys_file": "{{ _sglang_router_gateway_keys_file }}",
                   "router_keys_file": "{{ _sglang_router_keys_file }}"},
    }  # fmt: skip
    report = {
        "ansible.builtin.copy": {"content": "{{ found | to_json }}", "dest": str(tmp_path / "found.json")},
        "vars": {"item": "localhost", "found": found, "sglang_service": {"helper_dir": "{{ _sglang_server_helper_dir }}"}},
    }
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"sglang_gateway_hosts": ["localhost"], "sglang_router_enabled": True, "sglang_gateway_tls_ca": str(ca)},
            "tasks": [
                # The helpers' folder moved (a fact outranks the role's vars): remove.yml must follow it.
                {"ansible.builtin.set_fact": {"_sglang_server_helper_dir": "/opt/elsewhere/sglang-fleet"}},
                report,
                {"ansible.builtin.import_role": {"name": "sglang.fleet.sglang_router", "tasks_from": "remove"}, "when": False},
                {"ansible.builtin.import_role": {"name": "sglang.fleet.sglang_server", "tasks_from": "remove"}, "when": False},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "none.cfg").write_text("")
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rendered = json.loads((tmp_path / "found.json").read_text())
    assert rendered["remove"] == rendered["deploy"]
    assert rendered["remove"]["ca_file"] == "/opt/elsewhere/sglang-fleet/gateway-ca.pem"
    assert rendered["remove"]["keys_file"] == "/etc/sglang-router/gateway.json"


def test_remove_drains_a_gateway_of_a_mesh_by_the_url_the_mesh_knows_its_own_hosts_workers_by(tmp_path: Path) -> None:
    """Deploy registers a mesh gateway's own host's instances by remote_url (filter sglang_gateway_members): remove.yml
    must take them out by that URL, or they stay on every gateway of the mesh while the instances stop."""
    [gateway] = remove_task(GATEWAY_TASK)["gateways"]
    meshes = (["localhost"], ["localhost", "gw-b"])
    found = {str(len(gateways)): {"item": "localhost", "gateways": gateways} for gateways in meshes}
    tasks = [
        {"ansible.builtin.copy": {"content": "{{ worker_url }}", "dest": str(tmp_path / f"{name}.txt")},
         "vars": {**settings, "sglang_gateway_hosts": settings["gateways"], "worker_url": gateway["worker_url"]}}
        for name, settings in found.items()
    ]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "1.txt").read_text() == "url"
    assert (tmp_path / "2.txt").read_text() == "remote_url"


ACCOUNT_TASK = "Refuse to remove an account that is not the routers' own"


@pytest.mark.parametrize(("user", "refused"), [("root", True), ("sglang", True), ("sglang-router", False)])
def test_remove_refuses_an_sglang_router_user_that_is_root_or_the_servers_before_it_changes_anything(
    tmp_path: Path, user: str, refused: bool
) -> None:
    """remove.yml's own refusal, run in a local play that imports the roles as it does (their defaults), precedes every
    task that changes a host; the router role's removal would otherwise delete root's or the servers' account."""
    tasks: list[dict[str, Any]] = yaml.safe_load((ROOT / "playbooks/remove.yml").read_text())[0]["tasks"]
    names = [task.get("name") for task in tasks]
    assert names.index(ACCOUNT_TASK) < names.index(GATEWAY_TASK)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"sglang_router_user": user},
            "tasks": [
                tasks[names.index(ACCOUNT_TASK)],
                {"ansible.builtin.import_role": {"name": "sglang.fleet.sglang_router", "tasks_from": "remove"}, "when": False},
                {"ansible.builtin.import_role": {"name": "sglang.fleet.sglang_server", "tasks_from": "remove"}, "when": False},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "none.cfg").write_text("")
    run = local_play(tmp_path / "play.yml")
    assert (run.returncode != 0) == refused, run.stdout[-3000:]
    if refused:
        assert f'localhost router: sglang_router_user=\\"{user}\\"' in run.stdout, run.stdout[-3000:]
