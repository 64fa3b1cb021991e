"""/update_weights_from_disk and the start-up gauges: real SGLang 0.5.17 against the simulator (issue 42).

tests/recordings/sglang-0.5.17-h100-restarts/ (tests/hardware/restarts.py, README.md there) holds a real server launched
with ct129's settings on the sandbox's model (tests/fixtures/model_repo.py) and asked, in this order: /model_info, a
greedy /generate, an update to revision 2 (`weight_version: "rev2"`), /model_info, /generate, /metrics, an update from a
path that does not exist, /model_info, /generate, /metrics, and an update from revision 2 with a shard cut to half its
bytes (the server died). The simulator is started here with the recorded command line on the same generated
revisions and asked the same, and held to the recorded statuses, bodies (the recorded paths replaced by this test's),
weight versions and model paths, the gauges the fleet reads, and the crash.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import startup_metrics
from fixtures import model_repo
from simulator.simkit import free_port

from .recordings import RECORDINGS, Recording, Workspace, launch_args, poll_health, request

FOLDER = RECORDINGS / "sglang-0.5.17-h100-restarts"
COLD = FOLDER / "servers" / "cold"
LOG = (COLD / "server.log").read_text()
RECORDED_MODELS = "/tmp/hw-models"
# (the recorded file's name, method, path), in the recorded order
STEPS = [
    ("model_info.before", "GET", "/model_info"),
    ("generate.rev1", "POST", "/generate"),
    ("update.rev2", "POST", "/update_weights_from_disk"),
    ("model_info.after_update.rev2", "GET", "/model_info"),
    ("generate.after_update.rev2", "POST", "/generate"),
    ("update.missing_path", "POST", "/update_weights_from_disk"),
    ("model_info.after_update.missing_path", "GET", "/model_info"),
    ("generate.after_update.missing_path", "POST", "/generate"),
]


def recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((COLD / f"{name}.json").read_text()))


def localized(value: Any, models: Path) -> Any:
    """A recorded value with the recording machine's model directory replaced by this test's."""
    return json.loads(json.dumps(value).replace(RECORDED_MODELS, str(models)))


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("update-weights")
    models = tmp / "models"
    for name, revision in (("tiny-qwen3.5", 1), ("tiny-qwen3.5-rev2", 2), ("tiny-qwen3.5-broken", 2)):
        model_repo.build_repo(models / name, revision)
    shard = models / "tiny-qwen3.5-broken" / model_repo.SHARDS[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    workspace = Workspace(tmp, Recording(FOLDER))
    port = free_port()
    args = localized(launch_args(LOG), models)
    args = [*args[: args.index("--host")], "--host", "127.0.0.1", "--port", str(port), "--nccl-port", str(port + 1)]
    proc = workspace.launch(args)
    out: dict[str, Any] = {"models": models}
    try:
        health = poll_health(port, proc, timeout=60)
        assert all(steps and steps[-1][0] == 200 for steps in health.values()), (health, proc.poll())
        out["metrics.startup"] = request(port, "GET", "/metrics").body.decode()
        for name, method, path in STEPS:
            out[name] = request(port, method, path, localized(recorded(name).get("request"), models))
            if name.startswith("model_info.after"):
                out[f"metrics.{name[len('model_info.') :]}"] = request(port, "GET", "/metrics").body.decode()
        broken = localized(recorded("update.broken_shard")["request"], models)
        out["update.broken_shard"] = request(port, "POST", "/update_weights_from_disk", broken, timeout=30)
        out["returncode"] = proc.wait(timeout=30)
        out["log"] = proc.stdout.read() if proc.stdout else ""
        yield out
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ValueError, subprocess.TimeoutExpired):
            proc.communicate(timeout=10)


def test_the_recording_is_what_the_fleet_relies_on() -> None:
    """The facts as real 0.5.17 answered them (README.md of the recording)."""
    assert recorded("update.rev2")["body"] == {
        "success": True,
        "message": "Succeeded to update model weights. Weight version updated to rev2.",
        "num_paused_requests": 0,
    }
    assert recorded("model_info.before")["body"]["weight_version"] == "default"
    after = recorded("model_info.after_update.rev2")["body"]
    assert (after["weight_version"], after["model_path"]) == ("rev2", f"{RECORDED_MODELS}/tiny-qwen3.5-rev2")
    assert recorded("generate.after_update.rev2")["body"]["meta_info"]["weight_version"] == "rev2"
    missing = recorded("update.missing_path")
    assert missing["status"] == 400 and missing["body"]["success"] is False
    assert recorded("model_info.after_update.missing_path")["body"]["weight_version"] == "rev2", "nothing changed"
    assert recorded("update.broken_shard")["status"] == "error", "the server died without an answer"
    assert "kill_process_tree called" in LOG.splitlines()[-1]
    assert 'source="disk"' in (COLD / "metrics.after_update.rev2.txt").read_text()
    assert "weight_load_duration_seconds" not in (COLD / "metrics.startup.txt").read_text()


@pytest.mark.parametrize("name", [name for name, _, _ in STEPS])
def test_each_answer_as_recorded(replay: dict[str, Any], name: str) -> None:
    real, answer = recorded(name), replay[name]
    assert answer.status == real["status"], name
    body = answer.json()
    if name.startswith("update."):
        assert body == localized(real["body"], replay["models"])
    elif name.startswith("model_info."):
        for key in ("model_path", "weight_version", "tokenizer_path"):
            assert body[key] == localized(real["body"][key], replay["models"]), key
    else:
        assert body["meta_info"]["weight_version"] == real["body"]["meta_info"]["weight_version"]


def test_a_shard_cut_short_kills_the_server_as_it_killed_real_sglang(replay: dict[str, Any]) -> None:
    assert isinstance(replay["update.broken_shard"].status, str), "no answer: the connection is closed"
    assert replay["returncode"] == -9
    assert "incomplete metadata, file not fully covered" in replay["log"]
    assert "kill_process_tree called" in replay["log"]


def test_the_start_up_and_weight_load_gauges_read_as_the_real_ones(replay: dict[str, Any]) -> None:
    """What the fleet reads (plugins/module_utils/startup_metrics.py) is there in both, with the same keys."""
    real_start = startup_metrics.startup((COLD / "metrics.startup.txt").read_text())
    sim_start = startup_metrics.startup(replay["metrics.startup"])
    assert {k for k, v in real_start.items() if v is not None} == {k for k, v in sim_start.items() if v is not None}
    real_update = startup_metrics.startup((COLD / "metrics.after_update.rev2.txt").read_text())
    sim_update = startup_metrics.startup(replay["metrics.after_update.rev2"])
    assert real_update["weight_update_source"] == sim_update["weight_update_source"] == "disk"
    assert sim_update["weight_update"] is not None and sim_start["weight_update"] is None
