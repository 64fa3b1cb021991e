"""The admin keys generated on the control node (role sglang_router's defaults) exist only for the processes that run:
a router's for a host with a router, a gateway's for a gateway host; the role's removal (playbooks/remove.yml) takes
the host's away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleet import ROOT

PLAY = f"""
- name: The keys a deploy reads, then the removal
  hosts: all
  gather_facts: false
  vars_files: [{ROOT}/roles/sglang_router/defaults/main.yml]
  tasks:
    - name: Enable the router where the inventory asks (play vars, the role's defaults here, win over the inventory's)
      ansible.builtin.set_fact:
        sglang_router_enabled: "{{{{ router | default(false) }}}}"
    - name: Read the keys as preflight does
      ansible.builtin.debug:
        msg: "{{{{ sglang_router_admin_key | length }}}} {{{{ sglang_gateway_admin_key | length }}}}"
    - name: List the keys made
      ansible.builtin.command: ls {{{{ sglang_router_admin_key_dir }}}}
      changed_when: false
      run_once: true
      register: made
    - name: Show them
      ansible.builtin.debug:
        msg: "MADE {{{{ made.stdout_lines | join(',') }}}}"
      run_once: true
    - name: Remove the hosts
      ansible.builtin.import_role:
        name: sglang.fleet.sglang_router
        tasks_from: remove
        rolespec_validate: false
"""
INVENTORY = """
sglang_servers:
  hosts:
    routed: {router: true}
    gateway: {}
    plain: {}
sglang_gateways:
  hosts:
    gateway:
"""


def test_keys_are_made_only_for_processes_that_run_and_removed_with_their_host(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable} sglang_router_admin_key_dir={keys}"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
             "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "MADE gateway-gateway,routed" in ran.stdout
    assert list(keys.iterdir()) == []


def test_a_deploy_that_removes_a_process_no_longer_wanted_removes_its_key_alone(tmp_path: Path) -> None:
    """A deploy removes the routers no longer wanted (tasks/main.yml: sglang_router_remove_units): a router turned off
    takes its key with it, the gateway's stays; then the gateway, no longer wanted, takes its own."""
    keys = tmp_path / "keys"
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts.yml").write_text(INVENTORY.replace("gateway: {}", "gateway: {router: true}"))

    def run(units: str) -> str:
        ran = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable} sglang_router_admin_key_dir={keys}",
             "-e", f'{{"sglang_router_remove_units": {units}}}'],
            capture_output=True, text=True, check=False, cwd=tmp_path,
            env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
                 "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections")},
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
        return ran.stdout

    assert "MADE gateway,gateway-gateway,routed" in run('["sglang-router.service"]')
    assert sorted(path.name for path in keys.iterdir()) == ["gateway-gateway"]
    assert "MADE gateway,gateway-gateway,routed" in run('["sglang-gateway.service"]')
    assert sorted(path.name for path in keys.iterdir()) == ["gateway", "routed"]
