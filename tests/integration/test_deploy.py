"""`ansible-playbook deploy.yml` on the sandbox hosts: converges, and restarts only what changed."""

from __future__ import annotations

from pathlib import Path

from fleet import Run, overlay_inventory, run_playbook, unit_starts


def test_a_second_deploy_changes_nothing(sandbox: Run) -> None:
    again = run_playbook("deploy.yml")
    assert again.rc == 0, again.failure_messages()
    assert again.changed() == []


def test_changing_one_instance_restarts_that_instance_only(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    inventory = overlay_inventory(
        tmp_path, host_vars={"b200": {"sglang_instance_overrides": {3: {"server_args": {"max-running-requests": 256}}}}}
    )
    changed = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    try:
        assert changed.rc == 0, changed.failure_messages()
        after = unit_starts("b200")
        assert [unit for unit in before if before[unit] != after[unit]] == ["sglang-30003.service"]
        restarted = {label for host, task, label in changed.changed() if task == "Restart one instance"}
        assert restarted == {"sglang-30003.service"} or restarted == set(), changed.changed()
        assert {label for _, task, label in changed.changed() if "systemd unit" in task} == {"sglang-30003"}
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
    assert [unit for unit, start in unit_starts("b200").items() if start != after[unit]] == ["sglang-30003.service"]


def test_production_inventory_parses_and_lists_its_hosts() -> None:
    import subprocess

    from fleet import ROOT

    for option in ("--syntax-check", "--list-hosts"):
        result = subprocess.run(
            [str(ROOT / ".venv/bin/ansible-playbook"), "deploy.yml", "-i", "inventory/production", option],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    assert "b200" in result.stdout and "ct129" in result.stdout
