"""A model from a Hugging Face-compatible server (olah, serving a generated repository: tests/mirror.py), through the
role sglang_model: fetched once for the fleet, sent, verified, mended, refused when it differs from the lock file, and
rolled to a new revision."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from fleet import Run, on_host, overlay_inventory, run_playbook, unit_property, unit_starts
from mirror import start_mirror

ROLL_TASK = "Roll the changed running instances, verified, rolled back on failure"


def fetches(run: Run) -> dict[str, dict[str, Any]]:
    return {data["host"]: data["res"] for data in run.results() if data["task"].startswith("Fetch the model's files")}


def listing(host: str, directory: str) -> str:
    """Every file under the directory with its size and modification time."""
    return on_host(host, "find", directory, "-printf", "%p %s %T@\\n")


def host_digests(host: str, directory: str) -> dict[str, str]:
    listing = on_host(host, "sh", "-c", f"cd {directory} && sha256sum -- * .gitattributes")
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in listing.splitlines())}


def model_info(host: str, port: int) -> dict[str, Any]:
    """The instance's /model_info, asked inside the host (the sandbox's servers take no key)."""
    script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())"
    return dict(json.loads(on_host(host, "python3", "-c", script, f"http://127.0.0.1:{port}/model_info")))


def test_a_model_from_the_mirror_is_fetched_once_sent_verified_mended_refused_and_rolled(sandbox: Run, tmp_path: Path) -> None:
    mirror = start_mirror()
    first, second = mirror.commits
    cache = tmp_path / "cache"
    inventory = overlay_inventory(tmp_path)
    lock_file = inventory / "model-lock.yml"

    def check_mode_plan(extravars: dict[str, Any]) -> dict[str, Any]:
        """The rollout's answer to `--check --diff` on ct129; nothing changes."""
        checked = run_playbook("deploy.yml", inventory=inventory, extravars=extravars, limit="ct129", cmdline="--check --diff")
        assert checked.rc == 0, checked.failure_messages()
        assert unit_property("ct129", "sglang-30000.service", "MainPID") == pid
        return next(data["res"] for data in checked.results() if data["task"] == ROLL_TASK and data["host"] == "ct129")

    def settings(commit: str) -> dict[str, Any]:
        return {
            "sglang_model_path": "",
            "sglang_model": {"repo": mirror.repo, "revision": commit},
            "sglang_model_endpoint": mirror.endpoint,
            "sglang_model_cache_dir": str(cache),
        }

    root = f"/srv/models/{mirror.repo.replace('/', '--')}"
    b200_before = listing("b200", root)
    try:
        for commit in (first, second):
            locked = run_playbook("playbooks/model_lock.yml", inventory=inventory, extravars=settings(commit))
            assert locked.rc == 0, locked.failure_messages()
        lock = yaml.safe_load(lock_file.read_text())["models"]
        files = lock[f"{mirror.repo}@{first}"]["files"]
        wanted = {name: entry["sha256"] for name, entry in files.items()}

        # Two hosts, one download: one host's task fetched every byte, the other found them in the cache (in check
        # mode: the cache is the control node's; the hosts are left as they are).
        checked = run_playbook("deploy.yml", inventory=inventory, extravars=settings(first), cmdline="--check")
        assert checked.rc == 0, checked.failure_messages()
        fetched = sorted(result["fetched_bytes"] for result in fetches(checked).values())
        assert fetched == [0, sum(entry["size"] for entry in files.values())]
        assert listing("b200", root) == b200_before
        # The sandbox serves the first revision from the mirror already (group_vars/mirror_model.yml): ct129 loses
        # its copy, and receives it again.
        on_host("ct129", "rm", "-rf", root)
        deployed = run_playbook("deploy.yml", inventory=inventory, extravars=settings(first), limit="ct129")
        assert deployed.rc == 0, deployed.failure_messages()
        assert sum(result["fetched_bytes"] for result in fetches(deployed).values()) == 0
        assert host_digests("ct129", f"{root}/{first}") == wanted
        assert f"{root}/{first}" in unit_property("ct129", "sglang-30000.service", "ExecStart")
        assert on_host("ct129", "readlink", f"{root}/current").strip() == f"{root}/{first}"

        # A shard changed in place and another cut short on ct129 (an interrupted transfer), a blob of the control
        # node's cache corrupted: the next deploy fetches the blob again, sends the two shards and restarts nothing.
        shard_one, shard_two = (
            f"{root}/{first}/model-00001-of-00002.safetensors",
            f"{root}/{first}/model-00002-of-00002.safetensors",
        )
        on_host(
            "ct129",
            "sh",
            "-c",
            f"printf X | dd of={shard_one} bs=1 seek=4096 conv=notrunc status=none; truncate -s 1000 {shard_two}",
        )
        blob = cache / "blobs" / wanted["config.json"]
        blob.chmod(0o644)
        blob.write_bytes(b"{" + b" " * (files["config.json"]["size"] - 2) + b"}")
        before = unit_starts("ct129")
        mended = run_playbook("deploy.yml", inventory=inventory, extravars=settings(first), limit="ct129")
        assert mended.rc == 0, mended.failure_messages()
        assert fetches(mended)["ct129"]["fetched"] == ["config.json"]
        assert host_digests("ct129", f"{root}/{first}") == wanted
        assert unit_starts("ct129") == before
        assert [task for _, task, _ in mended.changed() if task.startswith("Send")] == [
            "Send the files the host lacks from the control node (wave 0)"
        ]

        # The source's file differs from the lock file: preflight names it, and nothing changes.
        original = lock_file.read_text()
        entry = lock[f"{mirror.repo}@{second}"]["files"]["generation_config.json"]
        lock_file.write_text(original.replace(entry["sha256"], hashlib.sha256(b"another").hexdigest()))
        refused = run_playbook("deploy.yml", inventory=inventory, extravars=settings(second), limit="ct129")
        lock_file.write_text(original)
        assert refused.rc != 0
        message = "\n".join(refused.failure_messages())
        assert "ct129 host: sglang_model=" in message and "generation_config.json" in message, message
        assert unit_starts("ct129") == before and sorted(on_host("ct129", "ls", root).split()) == sorted([first, "current"])

        # A new revision of the same architecture and shapes: sent beside the old one (kept for rollback) and loaded
        # in place (/update_weights_from_disk, issue 42): the unit now names it, the process is the same (MainPID),
        # and the rollout verified the revision as the weight_version the server reports.
        pid = unit_property("ct129", "sglang-30000.service", "MainPID")
        # Check mode first: the new revision is not on the host yet (the run sends it), so it cannot say which.
        plan = check_mode_plan(settings(second))
        assert plan["would_restart_or_update_in_place"] == ["sglang-30000"] and not plan["would_restart"], plan
        assert (
            plan["diff"]["prepared"] == "sglang-30000: restart or update in place (decided after the model's files are fetched)\n"
        )
        rolled = run_playbook("deploy.yml", inventory=inventory, extravars=settings(second), limit="ct129")
        assert rolled.rc == 0, rolled.failure_messages()
        assert f"{root}/{second}" in unit_property("ct129", "sglang-30000.service", "ExecStart")
        assert on_host("ct129", "readlink", f"{root}/current").strip() == f"{root}/{second}"
        assert sorted(on_host("ct129", "ls", root).split()) == sorted([first, second, "current"])
        assert unit_property("ct129", "sglang-30000.service", "MainPID") == pid, "no process restart"
        assert unit_starts("ct129") == before
        roll = next(data["res"] for data in rolled.results() if data["task"] == ROLL_TASK and data["host"] == "ct129")
        assert roll["restarted"]["sglang-30000"]["in_place"] is True
        assert roll["restarted"]["sglang-30000"]["weight_version"] == second

        # Back to the first revision, with a verification it cannot pass: the operator wants an accept length above
        # 2.0, and NEXTN with 2 draft tokens accepts 2 at most (the bonus token and the draft's one), so real SGLang
        # fails it as the simulator does; no simulator switch. The update is applied in place, fails its
        # verification, and the second revision is loaded back in place: same process, its weight_version and files
        # back, and the deploy fails naming the host, the instance and why.
        strict = {**settings(first), "sglang_server_min_accept_length": 2.0}
        # The first revision is still on the host: check mode says what the run does.
        plan = check_mode_plan(strict)
        assert plan["would_update_in_place"] == ["sglang-30000"] and not plan["would_restart"], plan
        assert plan["diff"]["prepared"] == "sglang-30000: update in place\n"
        failed = run_playbook("deploy.yml", inventory=inventory, extravars=strict, limit="ct129")
        assert failed.rc != 0
        [failure] = [data for data in failed.results("runner_on_failed") if data["task"] == ROLL_TASK]
        message = failure["res"]["msg"]
        assert failure["host"] == "ct129" and failure["res"]["failed_instance"] == "sglang-30000", message
        assert message.startswith("Rollout stopped at sglang-30000: sglang-30000: the in-place update to "), message
        assert "avg_spec_accept_length" in message and "is not above 2.0" in message, message
        assert f"loaded back {root}/{second} in place (weight_version {second})" in message, message
        assert model_info("ct129", 30000)["weight_version"] == second
        assert unit_property("ct129", "sglang-30000.service", "MainPID") == pid, "no process restart"
        assert unit_starts("ct129") == before
        assert f"{root}/{second}" in unit_property("ct129", "sglang-30000.service", "ExecStart")
    finally:
        restored = run_playbook("deploy.yml", limit="ct129")
        on_host("ct129", "rm", "-rf", f"{root}/{second}")
    assert restored.rc == 0, restored.failure_messages()
    assert on_host("ct129", "readlink", f"{root}/current").strip() == f"{root}/{first}"
