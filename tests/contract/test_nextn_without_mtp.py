"""NEXTN/EAGLE without --speculative-draft-model-path: the simulator against real SGLang 0.5.17 on an H200.

tests/recordings/sglang-0.5.17-h200-nextn-without-mtp/ (tests/hardware/nextn_without_mtp.py, README.md there) holds
four servers none of which was given a draft model: NEXTN and EAGLE on a MiMo checkpoint without its MTP layer,
NEXTN on a Qwen3 checkpoint (an architecture with no MTP head class), and NEXTN on the MiMo checkpoint with its MTP
layer. Real SGLang refused none of them. Each is replayed here against the simulator, started with the recorded
command line on a stand-in with the recorded config.json and tensor names (recordings.Workspace), and held to what
the real one did: it starts and serves, /server_info reports the same algorithm and draft path, and the acceptance
is the recorded one — exactly, for the heads that accept nothing; within the recorded range, for the target drafting
for itself.

test_sglang_contract.py replays the same folder for the structure of every answer; test_readers.py feeds its
answers to the product's rollout, which must refuse the servers that accept nothing.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout
from simulator.simkit import free_port

from .recordings import (
    RECORDINGS,
    Answer,
    Recording,
    Replay,
    Scenario,
    Workspace,
    poll_health,
    replay,
    strip_prefix,
)

FOLDER = RECORDINGS / "sglang-0.5.17-h200-nextn-without-mtp"
RECORDING = Recording(FOLDER)
SCENARIOS = {s.name: s for s in RECORDING.scenarios()}
# tag -> what the draft is, from the recorded log ("Load weight end. ... type=<draft class>") and README.md
UNTRAINED = ("nextn_mimo_no_mtp", "eagle_mimo_no_mtp")  # MiMoMTP with no model.mtp_layers.* to load
TARGET_AS_DRAFT = ("nextn_qwen3",)  # Qwen3ForCausalLM loaded a second time as its own draft
MTP_HEAD = ("nextn_mimo_mtp",)  # MiMoMTP from the checkpoint's model.mtp_layers.*: agrees under greedy decoding
# The control's MTP layer was built to agree with the target (gen_tiny mimo_mtp_agree): a draft quality the simulator
# cannot read from tensor names, so its replay is told it, with the knob meant for that.
KNOBS = {"nextn_mimo_mtp": {"SGLANG_SIM_ACCEPT_LENGTH": "4.0"}}


@cache
def replayed(tag: str, workspace_root: str) -> Replay:
    return replay(SCENARIOS[tag], Workspace(Path(workspace_root), RECORDING), **KNOBS.get(tag, {}))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("nextn-without-mtp"))


def generations(scenario: Scenario) -> list[dict[str, Any]]:
    return [e.json["meta_info"] for e in scenario.exchanges if e.path == "/generate" and isinstance(e.json, dict)]


def simulated_generations(run: Replay) -> list[dict[str, Any]]:
    return [answer.json()["meta_info"] for exchange, answer in run.answers if exchange.path == "/generate"]


def server_info(answer: Answer | dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = answer.json() if isinstance(answer, Answer) else answer["body"]
    return body


def test_the_recording_is_complete() -> None:
    assert set(SCENARIOS) == {*UNTRAINED, *TARGET_AS_DRAFT, *MTP_HEAD}
    assert RECORDING.version == "0.5.17"
    for tag, scenario in SCENARIOS.items():
        assert "--speculative-draft-model-path" not in scenario.args, tag
        assert scenario.recorded_model is not None, f"{tag}: models/listing.json lacks {scenario.args}"
        assert len(generations(scenario)) == 2, tag


@pytest.mark.parametrize("tag", sorted(SCENARIOS))
def test_the_recorded_checkpoint_is_what_the_scenario_says(tag: str) -> None:
    """The draft class real SGLang loaded, from its log, and whether the checkpoint had the MTP layer."""
    scenario = SCENARIOS[tag]
    loaded = re.findall(r"Load weight end\..*?type=(\w+)", scenario.log)
    listing = scenario.recorded_model
    assert listing is not None
    names = str(listing["model.safetensors.index.json"])
    if tag in TARGET_AS_DRAFT:
        assert loaded == ["Qwen3ForCausalLM", "Qwen3ForCausalLM"]
    else:
        assert loaded == ["MiMoForCausalLM", "MiMoMTP"]
        assert ("model.mtp_layers." in names) == (tag in MTP_HEAD)
        assert ("num_nextn_predict_layers" in str(listing["config.json"])) == (tag in MTP_HEAD)


@pytest.mark.parametrize("tag", sorted(SCENARIOS))
def test_it_starts_and_serves_like_real_sglang(tag: str, root: str) -> None:
    """Real SGLang starts every one of them (no up-front check of the draft) and answers every request."""
    scenario, run = SCENARIOS[tag], replayed(tag, root)
    assert scenario.timeline["shutdown"]["returncode"] == -9  # served, then SIGTERM
    real_health = {p: [(t["status"], t["body"]) for t in ts] for p, ts in scenario.timeline["health_transitions"].items()}
    assert run.health == real_health, run.log[-3000:]
    assert run.returncode == scenario.timeline["shutdown"]["returncode"]
    assert [a.status for _, a in run.answers] == [e.status for e in scenario.exchanges] == [200, 200]
    errors = [line for line in run.log.splitlines() if re.search(r"(Error|Exception): ", strip_prefix(line))]
    assert not errors, errors


@pytest.mark.parametrize("tag", sorted(SCENARIOS))
def test_server_info_reports_what_real_sglang_reported(tag: str, root: str) -> None:
    scenario, run = SCENARIOS[tag], replayed(tag, root)
    keys = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens", "max_running_requests")  # fmt: skip
    for stage in ("before", "after"):
        real, sim = server_info(scenario.server_info[stage]), server_info(run.server_info[stage])
        assert {k: sim[k] for k in keys} == {k: real[k] for k in keys}, stage
        assert real["speculative_algorithm"] == "EAGLE" and real["speculative_draft_model_path"] is None


@pytest.mark.parametrize("tag", UNTRAINED)
def test_an_mtp_head_without_its_tensors_accepts_nothing(tag: str, root: str) -> None:
    """Recorded: every request 256 tokens in 255 verify steps (1.0039), no draft accepted, the server-wide
    average 1.0 and the decode log's `accept len: 1.00, accept rate: 0.00`; nothing in the log says why."""
    scenario, run = SCENARIOS[tag], replayed(tag, root)
    fields = ("completion_tokens", "spec_verify_ct", "spec_accept_length", "spec_accept_rate")
    real = [{k: m[k] for k in fields} for m in generations(scenario)]
    sim = [{k: m[k] for k in fields} for m in simulated_generations(run)]
    assert sim == real
    assert real[0]["spec_accept_length"] == pytest.approx(256 / 255) and real[0]["spec_accept_rate"] == 0.0
    real_avg = server_info(scenario.server_info["after"])["internal_states"][0]["avg_spec_accept_length"]
    assert server_info(run.server_info["after"])["internal_states"][0]["avg_spec_accept_length"] == real_avg == 1.0
    real_lines = set(re.findall(r"accept len: [\d.]+, accept rate: [\d.]+", scenario.log))
    assert real_lines == {"accept len: 1.00, accept rate: 0.00"}
    assert set(re.findall(r"accept len: [\d.]+, accept rate: [\d.]+", run.log)) == real_lines
    for log in (scenario.log, run.log):
        assert not re.search(r"(?i)mtp weights|no mtp|draft.*(missing|not found)", log)


@pytest.mark.parametrize("tag", TARGET_AS_DRAFT)
def test_the_target_drafting_for_itself_accepts_like_real_sglang(tag: str, root: str) -> None:
    """Recorded: 3.46 (74 verify steps) and 4.0 (64) per request, 3.66 on average: within that range."""
    scenario, run = SCENARIOS[tag], replayed(tag, root)
    real = generations(scenario)
    low, high = min(m["spec_accept_length"] for m in real), max(m["spec_accept_length"] for m in real)
    steps = sorted(m["spec_verify_ct"] for m in real)
    for meta in simulated_generations(run):
        assert low <= meta["spec_accept_length"] <= high, (meta["spec_accept_length"], low, high)
        assert steps[0] <= meta["spec_verify_ct"] <= steps[-1]
    avg = server_info(run.server_info["after"])["internal_states"][0]["avg_spec_accept_length"]
    assert low <= avg <= high
    assert low <= server_info(scenario.server_info["after"])["internal_states"][0]["avg_spec_accept_length"] <= high


@pytest.mark.parametrize("tag", MTP_HEAD)
def test_the_checkpoints_mtp_layer_is_the_draft(tag: str, root: str) -> None:
    """Recorded: without a draft path, MiMo's model.mtp_layers.* became the draft (256 tokens in 64 verify steps).
    Told the draft's quality (KNOBS), the simulator counts the steps as real SGLang did."""
    scenario, run = SCENARIOS[tag], replayed(tag, root)
    fields = ("completion_tokens", "spec_verify_ct", "spec_accept_length")
    assert [{k: m[k] for k in fields} for m in simulated_generations(run)] == [
        {k: m[k] for k in fields} for m in generations(scenario)
    ]
    real_avg = server_info(scenario.server_info["after"])["internal_states"][0]["avg_spec_accept_length"]
    assert server_info(run.server_info["after"])["internal_states"][0]["avg_spec_accept_length"] == real_avg == 4.0


def test_without_the_knob_an_mtp_head_that_is_there_engages(root: str) -> None:
    """Not told anything, the simulator treats a present MTP layer as a trained draft (accept length above 1)."""
    (Path(root) / "plain").mkdir(exist_ok=True)
    run = replay(SCENARIOS["nextn_mimo_mtp"], Workspace(Path(root) / "plain", RECORDING))
    assert all(meta["spec_accept_length"] > 1.5 for meta in simulated_generations(run))


@pytest.mark.parametrize("tag", UNTRAINED)
def test_the_products_model_facts_see_no_mtp_in_these_checkpoints(tag: str, root: str) -> None:
    """What real SGLang served with an acceptance of 1.0 is what preflight refuses up front: instance_checks asks for
    mtp.* tensors and MTP layers in config.json for NEXTN/EAGLE without a draft model."""
    listing = SCENARIOS[tag].recorded_model
    assert listing is not None
    (Path(root) / "facts").mkdir(exist_ok=True)
    model = Workspace(Path(root) / "facts", RECORDING).recorded_model(tag, listing)
    facts = describe(str(model), {})
    assert facts["has_mtp_tensors"] is False and facts["mtp_layers"] == 0


@pytest.mark.parametrize("tag", [*UNTRAINED, *TARGET_AS_DRAFT])
def test_the_rollout_judges_the_simulator_as_it_judges_real_sglang(tag: str, root: str) -> None:
    """sglang_rollout.verify() against the simulator started like the recorded server: it refuses the untrained
    head ("not above 1.0", as test_readers.py shows it does with the real answers) and passes the target drafting
    for itself. What the sandbox's rollout tests see is what a real host would show."""
    scenario = SCENARIOS[tag]
    (Path(root) / "verify").mkdir(exist_ok=True)
    workspace = Workspace(Path(root) / "verify", RECORDING)
    port = free_port()
    proc = workspace.launch(
        workspace.argv(scenario.args, scenario.architecture, scenario.model_type, port, scenario.recorded_model)
    )
    try:
        assert poll_health(port, proc, timeout=30)["/health_generate"][-1][0] == 200
        instance = {
            "name": tag,
            "url": f"http://127.0.0.1:{port}",
            "speculative": {"reported_algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        }
        host = sglang_rollout.Host()
        if tag in UNTRAINED:
            with pytest.raises(sglang_rollout.RolloutError, match=r"avg_spec_accept_length 1\.0 is not above 1\.0"):
                sglang_rollout.verify(host, instance, probe_tokens=256, min_accept=1.0)
        else:
            assert sglang_rollout.verify(host, instance, probe_tokens=256, min_accept=1.0).startswith("256 tokens")
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
