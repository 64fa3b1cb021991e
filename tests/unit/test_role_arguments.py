"""Action sglang_role_arguments: several roles' entry points checked in one task, each as Ansible checks it when it
imports the role. Run through ansible-playbook on this machine (local connection), next to Ansible's own checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from fleet import local_play

# deploy.yml's preflight entry points, with one variable of the wrong type for each.
ENTRY_POINTS = {
    "sglang_model": "preflight",
    "sglang_plan": "main",
    "cuda": "preflight",
    "sglang_venv": "preflight",
    "sglang_server": "preflight",
    "sglang_router": "preflight",
}
WRONG = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_tensor_parallel_size": "two",
    "cuda_install_method": "conda",
    "sglang_venv_keep_previous": "some",
    "sglang_server_ready_timeout": "soon",
    "sglang_router_port": "eighty",
}
# What the entry points need that the plan publishes, and a version to install.
GIVEN = {"sglang_instances": [], "sglang_version": "0.5.23"}
PUBLISHED_LATER = ["cuda_environment", "sglang_runtime", "sglang_service"]


def play(tmp_path: Path, variables: dict[str, Any], tasks: list[dict[str, Any]]) -> tuple[int, dict[str, Any], str]:
    """Run `tasks` on this machine with `variables` (and its facts, which the CUDA role's defaults read); returns the
    exit code, what the play wrote to seen.json and its output."""
    written = {"ansible.builtin.copy": {"dest": str(tmp_path / "seen.json"), "content": "{{ seen | to_json }}"}}
    document = [{"hosts": "localhost", "gather_facts": True, "vars": variables, "tasks": [*tasks, written]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(document))
    run = local_play(tmp_path / "play.yml")
    seen = json.loads((tmp_path / "seen.json").read_text()) if (tmp_path / "seen.json").exists() else {}
    return run.returncode, seen, run.stdout + run.stderr


def checked(entry_points: dict[str, str], published_later: list[str]) -> dict[str, Any]:
    return {
        "sglang.fleet.sglang_role_arguments": {"entry_points": entry_points, "published_later": published_later},
        "register": "checked",
        "failed_when": False,
    }


def ansible_s_own_check(role: str, entry_point: str) -> dict[str, Any]:
    """The role imported as deploy.yml would import it without `rolespec_validate: false`: its errors added to
    seen[role] (the role's own tasks never run, every role here has a variable of the wrong type)."""
    return {
        "block": [{"ansible.builtin.include_role": {"name": f"sglang.fleet.{role}", "tasks_from": entry_point}}],
        "rescue": [
            {
                "ansible.builtin.set_fact": {
                    "ansible_s": "{{ ansible_s | default({}) | combine({role: ansible_failed_result.argument_errors}) }}"
                },
                "vars": {"role": role},
            }
        ],
    }


def test_every_entry_point_is_checked_as_ansible_checks_it(tmp_path: Path) -> None:
    tasks = [checked(ENTRY_POINTS, PUBLISHED_LATER)]
    tasks += [ansible_s_own_check(role, entry_point) for role, entry_point in ENTRY_POINTS.items()]
    tasks += [{"ansible.builtin.set_fact": {"seen": {"ours": "{{ checked }}", "ansible_s": "{{ ansible_s }}"}}}]
    code, seen, output = play(tmp_path, {**GIVEN, **WRONG}, tasks)
    assert code == 0 and seen, output[-3000:]
    ours, ansible_s = seen["ours"], seen["ansible_s"]
    assert ours["msg"].startswith("Validation of arguments failed:\n")
    assert set(ansible_s) == set(ENTRY_POINTS), "each role stopped at Ansible's check"
    # Ansible's, less what the roles publish later in deploy.yml (the server and the router require them).
    later = [f"missing required arguments: {', '.join(names)}" for names in (PUBLISHED_LATER[:2], PUBLISHED_LATER[2:])]
    expected = [
        f"role {role}, entry point {entry_point}: {error}"
        for role, entry_point in ENTRY_POINTS.items()
        for error in ansible_s[role]
        if error not in later
    ]
    assert sorted(ours["argument_errors"]) == sorted(expected)
    assert len(expected) == sum(len(errors) for errors in ansible_s.values()) - 2, ansible_s
    for variable in WRONG:
        assert any(variable in error for error in ours["argument_errors"]), variable


def test_options_published_later_are_left_out_and_the_others_required(tmp_path: Path) -> None:
    server = {"sglang_server": "preflight"}
    tasks = [
        {**checked(server, PUBLISHED_LATER), "register": "later"},
        {**checked(server, []), "register": "now"},
        {"ansible.builtin.set_fact": {"seen": {"later": "{{ later }}", "now": "{{ now }}"}}},
    ]
    code, seen, output = play(tmp_path, GIVEN, tasks)
    assert code == 0 and seen, output[-3000:]
    assert seen["later"].get("failed") is not True, seen["later"]
    assert seen["later"]["msg"] == "The arguments of sglang_server (preflight) are valid"
    [error] = seen["now"]["argument_errors"]
    assert error.startswith("role sglang_server, entry point preflight: missing required arguments:")
    assert "cuda_environment" in error and "sglang_runtime" in error


def test_an_unknown_entry_point_fails_naming_it(tmp_path: Path) -> None:
    tasks = [{"sglang.fleet.sglang_role_arguments": {"entry_points": {"cuda": "uninstall"}}}]
    code, _, output = play(tmp_path, GIVEN, tasks)
    assert code != 0
    assert "role cuda has no entry point 'uninstall' in its argument specs" in output
