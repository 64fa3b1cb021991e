"""Issue 42: a new revision of the same model, layout and settings is loaded in place (module_utils/in_place.py, the
rollout's update_in_place); anything else restarts. Real generated revisions (tests/fixtures/model_repo.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.systemd import systemd_exec_quote
from ansible_collections.sglang.fleet.plugins.module_utils import in_place
from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout as module
from fixtures import model_repo

PARAMS = {"batch": 1, "drain_timeout": 5, "timeout": 60, "interval": 1, "probe_tokens": 16, "min_accept_length": 1.0,
          "journal_lines": 5}  # fmt: skip
REV1, REV2 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models") / "sglang-fleet--tiny-qwen3.5"
    model_repo.build_repo(root / REV1, 1)
    model_repo.build_repo(root / REV2, 2)
    shutil.copytree(root / REV2, root / "broken")
    shard = root / "broken" / model_repo.SHARDS[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return root


def unit(model: Path, *extra: str) -> str:
    argv = ["/opt/sglang/bin/python", "-I", "/usr/local/lib/sglang-fleet/sglang_launcher.py", "sglang.launch_server",
            "--model-path", str(model), "--speculative-algorithm", "NEXTN", *extra, "--port", "30000"]  # fmt: skip
    return f"[Service]\nExecStart={systemd_exec_quote(argv)}\n"


def instance(tmp_path: Path, old: str, new: str, env_old: str = "A=1\n", env_new: str = "A=1\n") -> dict[str, Any]:
    files = instance_files("sglang-30000.service", str(tmp_path), str(tmp_path))
    (tmp_path / "last-good").mkdir(exist_ok=True)
    (tmp_path / "sglang-30000.service").write_text(new)
    (tmp_path / "last-good" / "sglang-30000.service").write_text(old)
    (tmp_path / "sglang-30000.env").write_text(env_new)
    (tmp_path / "last-good" / "sglang-30000.env").write_text(env_old)
    return {"name": "sglang-30000", "unit": "sglang-30000.service", "url": "http://127.0.0.1:30000", "files": files,
            "speculative": {"reported_algorithm": "EAGLE"}}  # fmt: skip


def test_a_new_revision_of_the_same_layout_is_applied_in_place(tmp_path: Path, models: Path) -> None:
    change = in_place.in_place_revision(instance(tmp_path, unit(models / REV1), unit(models / REV2)))
    assert change == {"from": str(models / REV1), "to": str(models / REV2), "weight_version": REV2}


@pytest.mark.parametrize(
    "why",
    ["another flag", "the environment", "a shard cut short", "another model", "the same revision", "another tokenizer",
     "another unit setting"],
)  # fmt: skip
def test_anything_else_restarts(tmp_path: Path, models: Path, why: str) -> None:
    old, new, env = unit(models / REV1), unit(models / REV2), "A=1\n"
    if why == "another flag":
        new = unit(models / REV2, "--mem-fraction-static", "0.8")
    elif why == "the environment":
        env = "A=2\n"
    elif why == "a shard cut short":
        new = unit(models / "broken")
    elif why == "another tokenizer":  # /update_weights_from_disk reloads weights only
        other = models / "retokenized"
        shutil.copytree(models / REV2, other, dirs_exist_ok=True)
        (other / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
        new = unit(other)
    elif why == "another unit setting":  # a limit or sandbox setting takes effect only at a start
        new = unit(models / REV2) + "MemoryMax=8G\n"
    elif why == "another model":
        other = models.parent / "other--model" / REV2
        shutil.copytree(models / REV2, other, dirs_exist_ok=True)
        new = unit(other)
    else:
        new = old
    assert in_place.in_place_revision(instance(tmp_path, old, new, env_new=env)) is None, why


def test_check_mode_tells_the_update_in_place_from_the_files_the_run_would_write(tmp_path: Path, models: Path) -> None:
    """Nothing is written in check mode: the unit on disk still names the running revision, `planned` the new one."""
    running = unit(models / REV1)
    server = instance(tmp_path, running, running)
    unit_path = server["files"]["unit"]
    assert in_place.check_mode_plan(server, {unit_path: unit(models / REV2)}) == in_place.IN_PLACE
    assert in_place.check_mode_plan(server, {unit_path: unit(models / REV2, "--mem-fraction-static", "0.8")}) == "restart"
    # The environment file changes too (a private file: its content is not given, only that it changes).
    changed_env = {unit_path: unit(models / REV2), server["files"]["environment"]: None}
    assert in_place.check_mode_plan(server, changed_env) == "restart"
    # The new revision is not on the host yet (the run sends it), or one of its shards is cut short (sent again).
    assert in_place.check_mode_plan(server, {unit_path: unit(models / "not-sent-yet")}) == (
        "restart or update in place (decided after the model's files are fetched)"
    )
    assert in_place.check_mode_plan(server, {unit_path: unit(models / "broken")}) == in_place.UNDECIDED
    # Whole, of another layout: a restart.
    other = models / "reshaped"
    shutil.copytree(models / REV2, other, dirs_exist_ok=True)
    (other / "config.json").write_text('{"architectures": ["Other"]}')
    assert in_place.check_mode_plan(server, {unit_path: unit(other)}) == "restart"


def test_the_modules_check_mode_says_update_in_place_per_instance(tmp_path: Path, models: Path) -> None:
    running = unit(models / REV1)
    server = instance(tmp_path, running, running)
    planned = {server["files"]["unit"]: unit(models / REV2)}
    params = {"instances": [server], "planned": planned, "nodes": ""}
    assert module.check_mode_plans(params) == {
        "would_restart": [],
        "would_update_in_place": ["sglang-30000"],
        "would_restart_or_update_in_place": [],
        "diff": {"prepared": "sglang-30000: update in place\n"},
    }
    across_hosts = module.check_mode_plans({**params, "nodes": "start"})
    assert across_hosts["would_restart"] == ["sglang-30000"] and across_hosts["diff"]["prepared"] == "sglang-30000: restart\n"
    assert module.check_mode_plans({**params, "instances": []}) == {
        "would_restart": [], "would_update_in_place": [], "would_restart_or_update_in_place": []
    }  # fmt: skip


class FakeServer:
    """/update_weights_from_disk, /model_info, /server_info and /generate as SGLang answers them; `report` is the
    weight_version /model_info reports after an update (None: the one asked for), `report_back` after the next one."""

    def __init__(self, log: list[str], report: str | None = None, refuse: bool = False, report_back: str | None = None) -> None:
        self.log, self.report, self.refuse, self.version = log, report, refuse, "default"
        self.reports = [report, report_back]

    def __call__(self, url: str, payload: dict[str, Any] | None = None, **_: Any) -> Any:
        path = url.split("30000", 1)[1]
        if path == "/update_weights_from_disk":
            assert payload is not None
            self.log.append(f"update {Path(payload['model_path']).name} as {payload['weight_version']}")
            if self.refuse:
                raise OSError("HTTP Error 400: Bad Request")
            self.version = (self.reports.pop(0) if self.reports else None) or payload["weight_version"]
            return {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
        if path == "/model_info":
            return {"weight_version": self.version}
        if path == "/generate":
            return {"meta_info": {"completion_tokens": 16}}
        return {"speculative_algorithm": "EAGLE", "internal_states": [{"avg_spec_accept_length": 2.0}]}


def host(log: list[str], server: FakeServer) -> module.Host:
    def wait_ready(batch: list[dict[str, Any]], *_: Any) -> dict[str, Any]:
        log.append("wait")
        return {"ready": {i["unit"]: 1.0 for i in batch}}

    return module.Host(
        systemctl=lambda *args: log.append(" ".join(args)),
        wait_ready=wait_ready,
        get_json=server,
        journal=lambda *args, **kwargs: "",
        running=lambda url: 0,
        metrics=lambda url: None,
        sleep=lambda seconds: None,
        settle=lambda instance: log.append(f"settle {instance['name']}"),
    )


def test_the_rollout_loads_the_revision_without_a_restart_and_keeps_its_files(tmp_path: Path, models: Path) -> None:
    log: list[str] = []
    server = instance(tmp_path, unit(models / REV1), unit(models / REV2))
    result = module.rollout(host(log, FakeServer(log)), [server], PARAMS)
    assert "failed_instance" not in result, result
    assert result["restarted"]["sglang-30000"]["in_place"] is True
    assert log == [f"update {REV2} as {REV2}", "daemon-reload", "settle sglang-30000"], "no restart"
    assert (tmp_path / "last-good" / "sglang-30000.service").read_text() == unit(models / REV2), "kept as verified"


def test_a_failed_verification_loads_the_previous_revision_back_without_a_restart(tmp_path: Path, models: Path) -> None:
    log: list[str] = []
    server = instance(tmp_path, unit(models / REV1), unit(models / REV2))
    result = module.rollout(host(log, FakeServer(log, report="stale")), [server], PARAMS)
    assert result["failed_instance"] == "sglang-30000" and "weight_version 'stale'" in result["reason"]
    assert result["rollback"]["sglang-30000"].startswith(f"loaded back {models / REV1} in place")
    assert log == [f"update {REV2} as {REV2}", f"update {REV1} as {REV1}", "daemon-reload"], "no restart"
    assert (tmp_path / "sglang-30000.service").read_text() == unit(models / REV1), "the previous files restored"


def test_a_previous_revision_that_does_not_come_back_as_asked_is_restarted_on_its_files(tmp_path: Path, models: Path) -> None:
    """Loaded back, the server must report the previous revision's weight_version (another client may have loaded other
    weights meanwhile); else the rollback restarts it on its restored files."""
    log: list[str] = []
    server = instance(tmp_path, unit(models / REV1), unit(models / REV2))
    result = module.rollout(host(log, FakeServer(log, report="stale", report_back="other")), [server], PARAMS)
    assert result["failed_instance"] == "sglang-30000"
    assert result["rollback"]["sglang-30000"].endswith("the previous configuration is serving again"), result["rollback"]
    assert log[:2] == [f"update {REV2} as {REV2}", f"update {REV1} as {REV1}"]
    assert "restart sglang-30000.service" in log
    assert (tmp_path / "sglang-30000.service").read_text() == unit(models / REV1), "the previous files restored"


def test_a_refused_update_keeps_the_previous_revision_and_its_files(tmp_path: Path, models: Path) -> None:
    log: list[str] = []
    server = instance(tmp_path, unit(models / REV1), unit(models / REV2))
    result = module.rollout(host(log, FakeServer(log, refuse=True)), [server], PARAMS)
    assert result["failed_instance"] == "sglang-30000" and "refused" in result["rollback"]["sglang-30000"]
    assert "restart" not in " ".join(log)
    assert (tmp_path / "sglang-30000.service").read_text() == unit(models / REV1)


def test_settled_files_no_longer_read_as_newer_than_the_process(
    tmp_path: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an in-place update the unit file is newer than the running process: dated back to just before its start,
    a later deploy does not count the instance stale (role_decisions.server_units) and restart it."""
    import os
    import subprocess

    from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import server_units

    server = instance(tmp_path, unit(models / REV1), unit(models / REV2))
    shown = "Sat 2026-12-05 11:00:00.000000 UTC"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=shown + "\n"))
    state = {"ActiveState": "active", "ExecMainStartTimestamp": shown}
    mtimes = {path: os.path.getmtime(path) for path, _ in server["files"]["last_good"] if os.path.exists(path)}
    assert server_units([server], {"units": {server["unit"]: state}, "mtimes": mtimes})["stale"] == [server]
    module.settle_files(server)
    mtimes = {path: os.path.getmtime(path) for path, _ in server["files"]["last_good"] if os.path.exists(path)}
    assert server_units([server], {"units": {server["unit"]: state}, "mtimes": mtimes})["stale"] == []


def test_a_shard_that_states_a_huge_header_or_is_no_file_is_no_layout(tmp_path: Path) -> None:
    """Root reads the shards' headers before the update: a header length beyond safetensors' own limit is not read (a
    read of 2**63 bytes raised OverflowError, a crash of the module; a few GB would be allocated), a FIFO not opened
    (its read would block)."""
    import os
    import struct

    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    assert in_place.shard_layout(str(huge)) is None
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    assert in_place.shard_layout(str(fifo)) is None
