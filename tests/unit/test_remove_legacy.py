"""playbooks/remove.yml's step of role sglang_plan (tasks_from: remove) also removes what earlier releases kept: the
probe request on the host (a fixed legacy path in the modules' user's home) and, on the control node, the entries
templates/, imports/, code/ and probe-key of sglang.fleet under Ansible's home, those only, never through a link. Run
through ansible-playbook on this machine (local connection: host and control node alike), with HOME and ANSIBLE_HOME
in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import yaml
from fleet import local_play


def remove(tmp_path: Path, ansible_home: Path, check: bool = False) -> None:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "sglang.fleet.sglang_plan",
                        "tasks_from": "remove",
                        "apply": {"check_mode": check},
                    },
                    "vars": {"sglang_plan_verified_file": str(tmp_path / "var/sglang-fleet/model-sha256.json")},
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    environment = {"HOME": str(tmp_path / "home"), "ANSIBLE_HOME": str(ansible_home)}
    run = local_play(tmp_path / "play.yml", environment)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_what_earlier_releases_kept_is_removed_and_nothing_else(tmp_path: Path) -> None:
    kept_request = tmp_path / "home/.ansible/sglang.fleet/probe-request.json"
    kept_request.parent.mkdir(parents=True)
    kept_request.write_text("{}")
    legacy = tmp_path / "ansible-home/sglang.fleet"
    for entry in ("templates", "imports", "code"):
        (legacy / entry / "ansible-2.19").mkdir(parents=True)
        (legacy / entry / "ansible-2.19/entry").write_text("kept\n")
    (legacy / "probe-key").write_bytes(bytes(32))
    (legacy / "other").write_text("not theirs\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "templates").mkdir(parents=True)
    (legacy / "imports/link-out").symlink_to(elsewhere)
    remove(tmp_path, legacy.parent, check=True)
    assert kept_request.exists() and len(list(legacy.iterdir())) == 5, "check mode removes nothing"
    remove(tmp_path, legacy.parent)
    assert not kept_request.exists()
    assert [path.name for path in legacy.iterdir()] == ["other"]
    assert (elsewhere / "templates").is_dir(), "what a link inside pointed to is left"


def test_a_linked_sglang_fleet_folder_on_the_control_node_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "templates").mkdir(parents=True)
    (elsewhere / "probe-key").write_bytes(bytes(32))
    (tmp_path / "ansible-home").mkdir()
    (tmp_path / "ansible-home/sglang.fleet").symlink_to(elsewhere)
    remove(tmp_path, tmp_path / "ansible-home")
    assert sorted(path.name for path in elsewhere.iterdir()) == ["probe-key", "templates"]
