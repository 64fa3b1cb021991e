"""playbooks/status.yml's step of role sglang_router (tasks_from: status) checks the gateway's TLS variables as deploy's
preflight does before it reads the CA (issue 38): a relative path (which Ansible's file lookup would look for in the
role's own folders), a folder or a missing file fails the gateway's host with a problem line naming the host and the
variable, and nothing is read. Run through ansible-playbook on this machine (local connection)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fleet import local_play

READ = "Read the router's and the fleet gateway's health, units and sandboxing"


def status(tmp_path: Path, ca: str) -> str:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"sglang_gateway_hosts": ["localhost"], "sglang_router_enabled": False, "sglang_gateway_tls_ca": ca},
            "tasks": [{"ansible.builtin.include_role": {"name": "sglang.fleet.sglang_router", "tasks_from": "status"}}],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "none.cfg").write_text("")
    run = local_play(tmp_path / "play.yml")
    assert run.returncode != 0, run.stdout[-3000:]
    return run.stdout + run.stderr


@pytest.mark.parametrize("ca", ["gateway-ca.pem", "{tmp}", "{tmp}/absent.pem"])
def test_status_refuses_a_ca_that_is_no_absolute_path_of_a_file(tmp_path: Path, ca: str) -> None:
    ca = ca.format(tmp=tmp_path)
    output = status(tmp_path, ca)
    assert f'localhost gateway: sglang_gateway_tls_ca="{ca}": not an absolute path of a file on the control node' in output
    assert f"TASK [sglang.fleet.sglang_router : {READ}]" not in output, "nothing is read"
