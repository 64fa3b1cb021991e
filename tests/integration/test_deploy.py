"""`ansible-playbook deploy.yml` on the sandbox hosts: converges, and restarts only what changed."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from fleet import ROOT, Run, changed_diffs, http_status, on_host, overlay_inventory, run_playbook, unit_starts


def test_a_second_sandbox_run_changes_nothing(sandbox: Run) -> None:
    """`make sandbox` again: the test hosts and the deploy both report no change; the deploy says so for each host and
    ends there, after preflight's two calls to it (the plan's gathering, then deploy's one probe of every role's
    files and reads), running none of the roles' steps."""
    for playbook in ("playbooks/sandbox.yml", "deploy.yml"):
        again = run_playbook(playbook)
        assert again.rc == 0, again.failure_messages()
        assert again.changed() == [], playbook
    said = {
        data["host"]: data["res"]["msg"]
        for data in again.results()
        if data["task"] == "Say what this deploy changes on each host"
    }
    assert said == {
        "ct129": "ct129: 1 instance(s) planned, no problems. Nothing to change",
        "b200": "b200: 7 instance(s) planned, no problems. Nothing to change",
    }
    ran = [event["event_data"]["task"] for event in again.events if event.get("event") in ("runner_on_ok", "runner_on_skipped")]
    assert ran[-2:] == ["Say what this deploy changes on each host"] * 2, "no task after it"
    calls = [data["task"] for data in again.results() if data["res"].get("invocation") and data["host"] == "b200"]
    assert [task.split(",")[0] for task in calls] == ["Gather GPUs", "Compare what every role would write with the host"], calls


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
        written = [data["res"] for data in changed.results() if data["task"].startswith("Write the instances' units")]
        assert [res["changed_instances"] for res in written] == [["sglang-30003"]]
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
    assert [unit for unit, start in unit_starts("b200").items() if start != after[unit]] == ["sglang-30003.service"]


def test_an_instance_no_longer_planned_is_stopped_and_removed(sandbox: Run, tmp_path: Path) -> None:
    before = unit_starts("b200")
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_instance_count": 6}})
    fewer = run_playbook("deploy.yml", inventory=inventory, limit="b200")
    try:
        assert fewer.rc == 0, fewer.failure_messages()
        after = unit_starts("b200")
        assert "sglang-30006.service" not in after
        assert {unit: before[unit] for unit in after} == after, "the other instances kept running"
        assert on_host("b200", "ls", "/etc/sglang-fleet", "/etc/systemd/system").count("sglang-30006") == 0
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
    assert restored.rc == 0, restored.failure_messages()
    assert "sglang-30006.service" in unit_starts("b200")


def test_previous_venvs_are_kept_for_rollback_and_older_ones_removed(sandbox: Run) -> None:
    for version, age in (("0.5.20", "3 days ago"), ("0.5.21", "2 days ago"), ("0.5.22", "1 day ago")):
        on_host("ct129", "mkdir", "-p", f"/opt/sglang/simulator-{version}/bin")
        on_host("ct129", "touch", "-d", age, f"/opt/sglang/simulator-{version}")
    result = run_playbook("deploy.yml", limit="ct129", tags="install")
    assert result.rc == 0, result.failure_messages()
    kept = sorted(on_host("ct129", "ls", "/opt/sglang").split())
    assert kept == ["simulator-0.5.22", "simulator-0.5.23"], "the current venv and the newest previous one"
    on_host("ct129", "rm", "-rf", "/opt/sglang/simulator-0.5.22")


def test_a_venv_that_a_unit_still_runs_is_never_removed(sandbox: Run) -> None:
    """After a rolled-back upgrade the fleet may run an older venv than the newest previous one: it stays."""
    referencing = "/etc/sglang-fleet/last-good/sglang-39999.service"
    for version, age in (("0.5.19", "3 days ago"), ("0.5.22", "1 day ago")):
        on_host("ct129", "mkdir", "-p", f"/opt/sglang/simulator-{version}/bin")
        on_host("ct129", "touch", "-d", age, f"/opt/sglang/simulator-{version}")
    on_host("ct129", "sh", "-c", f"echo 'ExecStart=/opt/sglang/simulator-0.5.19/bin/python -m sglang_simulator' > {referencing}")
    try:
        result = run_playbook("deploy.yml", limit="ct129", tags="install")
        assert result.rc == 0, result.failure_messages()
        kept = sorted(on_host("ct129", "ls", "/opt/sglang").split())
        assert kept == ["simulator-0.5.19", "simulator-0.5.22", "simulator-0.5.23"], "the one a unit runs, and the newest"
    finally:
        on_host("ct129", "rm", "-rf", "/opt/sglang/simulator-0.5.19", "/opt/sglang/simulator-0.5.22", referencing)


def test_an_install_changed_by_hand_is_found_by_the_probes_and_put_back_and_nothing_else_runs(sandbox: Run) -> None:
    """A converged host runs no install task; a package downgraded in the venv, a CUDA home pointing elsewhere and a
    missing checker file are each found by the install roles' probes, shown by --check and put back by the next run."""
    venv = "/opt/sglang/simulator-0.5.23"
    converged = run_playbook("deploy.yml", limit="ct129", tags="install")
    assert converged.rc == 0, converged.failure_messages()
    ran = {data["task"] for data in converged.results()} | {data["task"] for data in converged.results("runner_on_skipped")}
    assert not {"Install the pinned CUDA wheels into their own venv", "Install the router beside the simulator"} & ran
    home = on_host("ct129", "readlink", "/usr/local/cuda").strip()
    on_host("ct129", "sh", "-c", f"ln -sfn /tmp /usr/local/cuda && rm {venv}/check_server_args.py")
    on_host("ct129", "sh", "-c", f"mv {venv}/lib/python3.11/site-packages/smg-1.13.0.dist-info /tmp/router.dist-info")
    try:
        checked = run_playbook("deploy.yml", limit="ct129", tags="install", cmdline="--check")
        assert checked.rc == 0, checked.failure_messages()
        would = {task for host, task, label in checked.changed()}
        assert {
            "Point the CUDA home at the wheels' CUDA tree",
            "Install the command-line checker and the CUDA smoke check preflight uses",
        } <= would
        assert on_host("ct129", "readlink", "/usr/local/cuda").strip() == "/tmp", "--check changed the host"
        mended = run_playbook("deploy.yml", limit="ct129", tags="install")
        assert mended.rc == 0, mended.failure_messages()
        assert on_host("ct129", "readlink", "/usr/local/cuda").strip() == home
        assert on_host("ct129", "ls", f"{venv}/check_server_args.py").strip()
        assert "smg-1.13.0.dist-info" in on_host("ct129", "ls", f"{venv}/lib/python3.11/site-packages")
        again = run_playbook("deploy.yml", limit="ct129", tags="install")
        assert again.rc == 0 and again.changed() == [], again.changed()
    finally:
        on_host("ct129", "rm", "-rf", "/tmp/router.dist-info")


def test_the_built_collection_deploys_the_sandbox_from_a_project_of_its_own(sandbox: Run, tmp_path: Path) -> None:
    """`ansible-galaxy collection build`, installed into another project's collections path: its deploy playbook runs
    the sandbox from there (the roles, modules and filters all from the artifact) and finds nothing to change."""
    import subprocess

    from fleet import ROOT, SANDBOX_INVENTORY

    galaxy = str(ROOT / ".venv/bin/ansible-galaxy")
    built = subprocess.run(
        [galaxy, "collection", "build", "--output-path", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    [artifact] = tmp_path.glob("sglang-fleet-*.tar.gz")
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {tmp_path / 'collections'}\n")
    environment = {
        "PATH": f"{ROOT / '.venv/bin'}:/usr/bin:/bin",
        "HOME": str(Path.home()),
        "ANSIBLE_CONFIG": str(project / "ansible.cfg"),
    }
    installed = subprocess.run(
        [galaxy, "collection", "install", "--no-deps", str(artifact), "-p", str(tmp_path / "collections")],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    assert not (tmp_path / "collections/ansible_collections/sglang/fleet/roles/testhost").exists(), "the test double ships"
    deployed = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "sglang.fleet.deploy",
            "-i",
            str(SANDBOX_INVENTORY),
            # The simulator stands in for SGLang on these hosts; it is not part of the product's artifact.
            "-e",
            f"sglang_venv_simulator_source={ROOT / 'simulator/src/sglang_simulator'}",
        ],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    # The roles are the artifact's: Ansible names them by the collection (sglang.fleet.<role> : <task>).
    assert "sglang.fleet.sglang_plan : " in deployed.stdout and "sglang.fleet.sglang_server : " in deployed.stdout
    recap = deployed.stdout[deployed.stdout.index("PLAY RECAP") :]
    assert recap.count("changed=0") == 2, recap


def test_a_verified_model_file_is_read_once_and_again_only_after_it_changes(sandbox: Run) -> None:
    """The sandbox's model (sglang_model, from the mirror) was hashed when it arrived; a deploy trusts the record while
    a file's size, time and inode stay, and reads a touched file again, once (sglang_model_sha256 over weights managed
    by hand does the same: tests/unit/test_model_facts.py). remove.yml takes the record away (test below)."""
    model = yaml.safe_load((ROOT / "inventory/sandbox/group_vars/mirror_model.yml").read_text())["sglang_model"]
    config = f"/srv/models/{model['repo'].replace('/', '--')}/{model['revision']}/config.json"
    lock = yaml.safe_load((ROOT / "inventory/sandbox/model-lock.yml").read_text())["models"]
    locked = lock[f"{model['repo']}@{model['revision']}"]["files"]["config.json"]["sha256"]

    def hashed(run: Run) -> list[str]:
        [facts] = [data["res"] for data in run.results() if data["task"].startswith("Gather GPUs") and data["host"] == "ct129"]
        return list(facts["model"]["hashed"])

    on_host("ct129", "touch", config)
    first = run_playbook("deploy.yml", limit="ct129")
    assert first.rc == 0, first.failure_messages()
    assert hashed(first) == ["config.json"]
    assert [task for _, task, _ in first.changed()] == ["Record the model files verified by their SHA-256"]
    record = json.loads(on_host("ct129", "cat", "/var/lib/sglang-fleet/model-sha256.json"))
    assert record[config]["sha256"] == locked
    again = run_playbook("deploy.yml", limit="ct129")
    assert again.rc == 0 and hashed(again) == [] and again.changed() == [], again.changed()


def test_remove_takes_the_fleet_off_a_host_and_leaves_nothing_of_it(sandbox: Run, tmp_path: Path) -> None:
    """playbooks/remove.yml on ct129: no sglang unit, file, account or group is left (the model and the test double's
    stand-in nvidia-smi are not the fleet's); b200 is untouched; the next deploy brings ct129 back."""
    b200_before = unit_starts("b200")
    # What earlier releases kept: deploy's probe request on the host, caches and a key on the control node (under
    # ANSIBLE_HOME, here a folder of the test's own; an entry that is not theirs, and a link, are left alone).
    kept = "/root/.ansible/sglang.fleet/probe-request.json"
    on_host("ct129", "sh", "-c", f"mkdir -p {Path(kept).parent} && echo '{{}}' > {kept}")
    legacy = tmp_path / "ansible-home/sglang.fleet"
    for entry in ("templates/ansible-2.19", "imports/ansible-2.19", "code/ansible-2.19"):
        (legacy / entry).mkdir(parents=True)
        (legacy / entry / "entry").write_text("kept\n")
    (legacy / "probe-key").write_bytes(bytes(32))
    (legacy / "other").write_text("not theirs\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "templates").mkdir(parents=True)
    linked = tmp_path / "linked-home"
    linked.mkdir()
    (linked / "sglang.fleet").symlink_to(elsewhere)
    checked = run_playbook("playbooks/remove.yml", limit="ct129", cmdline="--check")
    assert checked.rc == 0, checked.failure_messages()
    assert "sglang-30000.service" in on_host("ct129", "systemctl", "list-units", "--no-legend", "sglang-30000.service")
    assert sorted(path.name for path in legacy.iterdir()) == ["code", "imports", "other", "probe-key", "templates"]
    removed = run_playbook("playbooks/remove.yml", limit="ct129", envvars={"ANSIBLE_HOME": str(legacy.parent)})
    try:
        assert sorted(path.name for path in legacy.iterdir()) == ["other"], "the legacy caches and key, only them"
        assert removed.rc == 0, removed.failure_messages()
        # list-unit-files exits 1 when nothing matches.
        listing = "systemctl list-unit-files --no-legend 'sglang*'; systemctl list-units --all --no-legend 'sglang*'; true"
        units = on_host("ct129", "sh", "-c", listing)
        assert units.strip() == "", units
        # Not the fleet's: the models, the test double's stand-ins (nvidia-smi, its simulator, state), temporary files.
        outside = ["/proc", "/srv/models", "/home/preflight-models", "/opt/sglang-simulator-standin", "/etc/sglang-simulator"]
        outside += ["/run/sglang-simulator", "/etc/tmpfiles.d/sglang-simulator.conf", "/tmp", "/root"]
        skip = " ".join(f"-not -path '{path}*'" for path in outside)
        script = f"find / -xdev -iname '*sglang*' {skip}; getent passwd sglang; getent group sglang; true"
        found = on_host("ct129", "sh", "-c", script)
        assert found.strip() == "", found
        assert on_host("ct129", "sh", "-c", "ls -A /root/.ansible/sglang.fleet 2>/dev/null; true").strip() == "", "kept probe"
        assert unit_starts("b200") == b200_before, "b200 was touched"
        again = run_playbook("playbooks/remove.yml", limit="ct129", envvars={"ANSIBLE_HOME": str(linked)})
        assert (elsewhere / "templates").is_dir(), "a link to a folder elsewhere is not followed"
        assert again.rc == 0 and again.changed() == [], again.changed()
    finally:
        restored = run_playbook("deploy.yml", limit="ct129")
    assert restored.rc == 0, restored.failure_messages()
    assert http_status("ct129", "http://127.0.0.1:30000/health_generate") == 200


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


def test_a_unit_edited_by_hand_is_shown_by_check_diff_then_put_back_and_only_its_instance_restarts(sandbox: Run) -> None:
    unit = "/etc/systemd/system/sglang-30002.service"
    on_host("b200", "sh", "-c", f"sed -i 's/^RestartSec=.*/RestartSec=1/' {unit} && systemctl daemon-reload")
    before = unit_starts("b200")
    checked = run_playbook("deploy.yml", limit="b200", cmdline="--check --diff")
    assert checked.rc == 0, checked.failure_messages()
    diffs = changed_diffs([data["res"] for data in checked.results()])
    assert [d["after_header"] for d in diffs if "RestartSec=1" in d.get("before", "")] == [unit]
    assert unit_starts("b200") == before, "--check restarted something"
    mended = run_playbook("deploy.yml", limit="b200")
    assert mended.rc == 0, mended.failure_messages()
    assert "RestartSec=1\n" not in on_host("b200", "cat", unit)
    after = unit_starts("b200")
    assert [name for name in before if before[name] != after[name]] == ["sglang-30002.service"]
