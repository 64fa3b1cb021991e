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
from fleet import ROOT, local_play, router_settings

GATEWAY_TASK = "Take the host's instances out of every fleet gateway"
ROUTER_TASK = "Take the host's instances out of its router, let them finish their requests, and stop them"


def remove_task(name: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROOT / "playbooks/remove.yml").read_text())[0]["tasks"]
    [task] = [task for task in tasks if task.get("name") == name]
    arguments: dict[str, Any] = task["sglang.fleet.sglang_rollout"]
    return arguments


def removed_routers(tmp_path: Path, **variables: Any) -> dict[str, Any]:
    """remove.yml's `remove_routers` (filter sglang_router_leave, which the gateways' and the router's tasks read),
    rendered by ansible-playbook on this machine (local connection) in a play that imports the role as remove.yml does,
    with `variables`."""
    [play] = yaml.safe_load((ROOT / "playbooks/remove.yml").read_text())
    assert remove_task(GATEWAY_TASK)["gateways"] == ["{{ item }}"]
    assert remove_task(ROUTER_TASK)["router_keys_file"] == "{{ remove_routers.router_keys_file }}"
    tasks = [
        {"ansible.builtin.copy": {"content": "{{ remove_routers | to_json }}", "dest": str(tmp_path / "found.json")},
         "vars": {"remove_routers": play["vars"]["remove_routers"]}},
        {"ansible.builtin.import_role": {"name": "sglang.fleet.sglang_router", "tasks_from": "remove"}, "when": False},
    ]  # fmt: skip
    plays = [{"hosts": "localhost", "gather_facts": False, "vars": variables, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays))
    run = local_play(tmp_path / "play.yml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found: dict[str, Any] = json.loads((tmp_path / "found.json").read_text())
    return found


def test_remove_takes_the_gateway_ca_and_keys_files_from_the_roles_definitions(tmp_path: Path) -> None:
    """Where deploy's preflight put them (filter sglang_router_settings, the helpers' folder as the server role
    publishes it), from the role's one definition: no variable private to a role is read."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    variables = {"sglang_gateway_hosts": ["localhost"], "sglang_router_enabled": True, "sglang_gateway_tls_ca": str(ca)}
    removed = removed_routers(tmp_path, **variables)
    deployed = router_settings("localhost", **variables)
    [gateway] = removed["gateways"]
    assert gateway["ca_file"] == deployed["tls"]["ca_file"] == "/usr/local/lib/sglang-fleet/gateway-ca.pem"
    assert gateway["keys_file"] == deployed["keys_files"]["gateway"] == "/etc/sglang-router/gateway.json"
    assert removed["router_keys_file"] == deployed["keys_files"]["router"] and removed["router_url"] == deployed["url"]
    assert (gateway["host"], gateway["url"]) == ("localhost", deployed["gateway_url"])
    assert "_sglang_" not in (ROOT / "playbooks/remove.yml").read_text(), "no variable private to a role"


def test_remove_drains_a_gateway_of_a_mesh_by_the_url_the_mesh_knows_its_own_hosts_workers_by(tmp_path: Path) -> None:
    """Deploy registers a mesh gateway's own host's instances by remote_url (filter sglang_gateway_members): remove.yml
    must take them out by that URL, or they stay on every gateway of the mesh while the instances stop."""
    alone = removed_routers(tmp_path, sglang_gateway_hosts=["localhost"])["gateways"]
    mesh = removed_routers(tmp_path, sglang_gateway_hosts=["localhost", "gw-b"])["gateways"]
    assert [gateway["worker_url"] for gateway in alone] == ["url"]
    assert [gateway["worker_url"] for gateway in mesh] == ["remote_url", "remote_url"]


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
