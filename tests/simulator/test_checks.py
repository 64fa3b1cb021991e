"""Startup resolution and the failures real SGLang would hit."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from sglang_simulator.args import parse_args
from sglang_simulator.checks import Plan, place_launch, resolve_launch
from sglang_simulator.errors import StartupError
from sglang_simulator.facts import load_facts
from sglang_simulator.knobs import Knobs
from sglang_simulator.resolve import resolve_memory

from .simkit import B200_MIB, GIB, Env, make_model, run_sim, write_gpus

LOG = logging.LoggerAdapter(logging.getLogger("test"), {"rank": ""})


def plan_for(env: Env, argv: list[str], cuda_visible: str | None = None) -> Plan:
    facts = load_facts()
    knob = Knobs(gpus_file=env.gpus_file, state_dir=env.state_dir)
    resolved = resolve_launch(parse_args(argv, facts), knob, facts, LOG)
    environ = {} if cuda_visible is None else {"CUDA_VISIBLE_DEVICES": cuda_visible}
    plan = place_launch(resolved, knob, environ, facts, LOG)
    if plan.memory_error is not None:
        raise plan.memory_error
    return plan


def test_nextn_is_reported_as_eagle_and_topk1_forces_draft_tokens(sim_env: Env, model_dir: Path) -> None:
    plan = plan_for(
        sim_env,
        [
            *("--model-path", str(model_dir), "--tp-size", "2", "--speculative-algorithm", "NEXTN"),
            *("--speculative-num-steps", "1", "--speculative-eagle-topk", "1"),
            *("--speculative-num-draft-tokens", "5"),
        ],
    )
    s = plan.settings
    assert s["speculative_algorithm"] == "EAGLE"
    assert (s["speculative_num_steps"], s["speculative_eagle_topk"], s["speculative_num_draft_tokens"]) == (
        1,
        1,
        2,
    )
    assert s["max_running_requests"] == 48  # unset -> 48 with speculative decoding
    assert plan.accept_length is not None and 1.0 < plan.accept_length <= 2.0


def test_ngram_resolution_like_real_sglang(sim_env: Env, model_dir: Path) -> None:
    """Recorded on real 0.5.17 (tests/recordings/), same code in 0.5.23's _handle_ngram."""
    argv = ["--model-path", str(model_dir), "--speculative-algorithm", "NGRAM"]
    s = plan_for(sim_env, [*argv, "--speculative-num-draft-tokens", "4"]).settings
    assert s["speculative_algorithm"] == "NGRAM" and s["max_running_requests"] == 48
    steps, topk, draft = "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"
    assert (s[steps], s[topk], s[draft]) == (0, 10, 4)
    s = plan_for(sim_env, [*argv, "--speculative-eagle-topk", "2", "--max-running-requests", "8"]).settings
    assert (s[topk], s[draft], s["max_running_requests"]) == (10, 12, 8)


def test_auto_speculative_params(sim_env: Env, model_dir: Path) -> None:
    plan = plan_for(sim_env, ["--model-path", str(model_dir), "--speculative-algorithm", "EAGLE"])
    s = plan.settings
    assert (s["speculative_num_steps"], s["speculative_eagle_topk"], s["speculative_num_draft_tokens"]) == (
        3,
        1,
        4,
    )
    llama = make_model(sim_env.tmp / "llama", architecture="LlamaForCausalLM", total_size=16 * GIB)
    plan = plan_for(sim_env, ["--model-path", str(llama), "--speculative-algorithm", "EAGLE3"])
    assert plan.settings["speculative_num_steps"] == 5 and plan.settings["speculative_eagle_topk"] == 4


def test_speculative_assertion(sim_env: Env, model_dir: Path) -> None:
    argv = [
        "--model-path",
        str(model_dir),
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "1",
    ]
    with pytest.raises(StartupError) as info:
        plan_for(sim_env, argv)
    assert str(info.value) == "AssertionError"
    assert "--speculative-num-steps is unset" in info.value.details[0]


def test_unknown_architecture(sim_env: Env, tmp_path: Path) -> None:
    model = make_model(tmp_path / "odd", architecture="NotARealModelForCausalLM")
    with pytest.raises(StartupError, match=re.escape("Cannot find model module. 'NotARealModelForCausalLM'")):
        plan_for(sim_env, ["--model-path", str(model)])


def test_missing_config_json(sim_env: Env, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(StartupError, match=re.escape("does not appear to have a file named config.json")):
        plan_for(sim_env, ["--model-path", str(tmp_path / "empty")])


def test_weights_do_not_fit(sim_env: Env, tmp_path: Path) -> None:
    write_gpus(sim_env.gpus_file, count=2, memory_mib=81559, name="NVIDIA H100 80GB HBM3")
    model = make_model(tmp_path / "big", total_size=160 * GIB)
    with pytest.raises(StartupError) as info:  # tp 1: 149 GiB of weights on an 80 GB GPU
        plan_for(sim_env, ["--model-path", str(model)])
    assert "CUDA out of memory" in str(info.value) and "Weights need 149.01 GiB" in info.value.details[0]
    with pytest.raises(StartupError) as info:  # tp 2: 74.5 GiB each, more than 0.85 x 79.6 GiB
        plan_for(sim_env, ["--model-path", str(model), "--tp-size", "2"])
    assert "Loaded weights leave no GPU memory for the KV cache" in str(info.value)
    assert "Needed 74.51 GiB of weights per GPU, available" in info.value.details[0]


def test_no_mtp_weights_starts_with_an_untrained_draft(sim_env: Env, tmp_path: Path) -> None:
    """Real SGLang does not refuse NEXTN/EAGLE on a checkpoint without MTP tensors: the MTP head loads nothing
    and accepts nothing (tests/recordings/sglang-0.5.17-h200-nextn-without-mtp/: accept length 1.0)."""
    model = make_model(tmp_path / "no-mtp", mtp=False)
    for algorithm in ("NEXTN", "EAGLE"):
        plan = plan_for(sim_env, ["--model-path", str(model), "--speculative-algorithm", algorithm])
        assert plan.speculative_algorithm == "EAGLE" and plan.accept_length == 1.0
        assert plan.settings["speculative_draft_model_path"] is None and plan.draft is None
    mtp = make_model(tmp_path / "mtp")
    with_mtp = plan_for(sim_env, ["--model-path", str(mtp), "--speculative-algorithm", "NEXTN"])
    assert with_mtp.accept_length is not None and with_mtp.accept_length > 1.0
    draft = make_model(tmp_path / "draft", total_size=2 * GIB)
    plan = plan_for(
        sim_env,
        [
            "--model-path",
            str(model),
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-draft-model-path",
            str(draft),
        ],
    )
    assert plan.draft is not None and plan.settings["speculative_draft_model_revision"] == "main"
    assert plan.accept_length is not None and plan.accept_length > 1.0  # a separate draft model is trained


def test_draft_kinds_follow_sglangs_draft_model_config(sim_env: Env, tmp_path: Path) -> None:
    """ModelConfig._config_draft_model: an MTP-head architecture drafts with its head (MiMo names it
    model.mtp_layers.*), any other architecture with the target itself (recorded: Qwen3, 3.46 to 4.0)."""
    mimo = make_model(tmp_path / "mimo", architecture="MiMoForCausalLM", mtp=False)
    index_path = mimo / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    nextn = ["--speculative-algorithm", "NEXTN"]
    assert plan_for(sim_env, ["--model-path", str(mimo), *nextn]).accept_length == 1.0
    index["weight_map"]["model.mtp_layers.0.input_proj.weight"] = "model-00002-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    head = plan_for(sim_env, ["--model-path", str(mimo), "--speculative-algorithm", "NEXTN"]).accept_length
    assert head is not None and head > 1.0
    dense = make_model(tmp_path / "qwen3", architecture="Qwen3ForCausalLM", mtp=False)
    plan = plan_for(sim_env, ["--model-path", str(dense), "--speculative-algorithm", "NEXTN"])
    assert plan.accept_length is not None and 3.46 <= plan.accept_length <= 4.0  # 3 steps by default
    unknown = make_model(tmp_path / "no-index", mtp=False)
    index_path = unknown / "model.safetensors.index.json"
    index_path.unlink()  # no tensor names (the sparse shards have no header): assume the head is there
    plan = plan_for(sim_env, ["--model-path", str(unknown), "--speculative-algorithm", "NEXTN"])
    assert plan.accept_length is not None and plan.accept_length > 1.0


def test_cuda_visible_devices(sim_env: Env, model_dir: Path) -> None:
    argv = ["--model-path", str(model_dir), "--tp-size", "2"]
    assert [g.index for g in plan_for(sim_env, argv, cuda_visible="1,0").gpus] == [1, 0]
    with pytest.raises(StartupError, match="invalid device ordinal"):
        plan_for(sim_env, argv, cuda_visible="0,5")  # CUDA stops at the unknown 5
    with pytest.raises(StartupError, match="invalid device ordinal"):
        plan_for(sim_env, ["--model-path", str(model_dir), "--tp-size", "4"])
    with pytest.raises(StartupError, match="No CUDA GPUs are available"):
        plan_for(sim_env, argv, cuda_visible="")


def test_auto_mem_fraction_b200() -> None:
    settings: dict[str, object] = {"tp_size": 1, "pp_size": 1, "mem_fraction_static": None}
    plan = resolve_memory(settings, B200_MIB)
    assert plan.mem_fraction_is_auto and plan.chunked_prefill_size == 16384 and plan.decode_max_bs == 512
    assert 0.8 < plan.mem_fraction_static < 0.9


def test_startup_failure_exit_code_and_message(sim_env: Env, tmp_path: Path) -> None:
    model = make_model(tmp_path / "odd", architecture="NotARealModelForCausalLM")
    result = run_sim("sglang_simulator", ["--model-path", str(model)], sim_env.environ())
    assert result.returncode == -9  # the launch-phase SIGQUIT handler SIGKILLs the process tree
    assert "Scheduler hit an exception: Traceback (most recent call last):" in result.stderr
    assert "\nValueError: Cannot find model module." in result.stderr
    assert "kill_process_tree called: parent_pid=" in result.stderr
    assert "server_args={" in result.stderr
