"""The KV pool's size (--max-total-tokens), the mamba cache of hybrid models, the hicache host pool."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sglang_simulator import metrics, responses
from sglang_simulator.cache_pools import hicache_host_tokens, mamba_cache_chunk_size
from sglang_simulator.checks import Plan
from sglang_simulator.engine import Engine
from sglang_simulator.model import load_model

from .simkit import Env
from .test_checks import LOG, plan_for

KV_BYTES_PER_TOKEN = 2 * 16 * 4 * 256 * 2  # make_model: 16 full-attention layers of 4 KV heads of 256, bf16


def _state(plan: Plan) -> dict[str, Any]:
    info = responses.server_info(
        plan, launch_command="", startup_time={}, last_gen_throughput=0.0, avg_spec_accept_length=None
    )
    state: dict[str, Any] = info["internal_states"][0]
    return state


def _metrics(plan: Plan) -> str:
    engine = Engine(
        max_running_requests=1,
        token_seconds=0.0,
        eos_token_id=2,
        accept_length=None,
        num_draft_tokens=None,
        decode_log_interval=40,
        log=LOG,
    )
    facts = metrics.ServerFacts(
        model_name="m",
        max_total_num_tokens=plan.max_total_num_tokens,
        hicache_host_total_tokens=hicache_host_tokens(plan.settings, plan.model, plan.max_total_num_tokens),
    )
    return metrics.render(engine, model_name="m", max_total_num_tokens=plan.max_total_num_tokens, facts=facts)


def test_max_total_tokens_caps_the_kv_pool(
    sim_env: Env, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    profiled = plan_for(sim_env, ["--model-path", str(model_dir)]).max_total_num_tokens
    assert profiled > 65536
    capped = plan_for(sim_env, ["--model-path", str(model_dir), "--max-total-tokens", "65536"])
    assert capped.max_total_num_tokens == 65536  # real 0.5.17: server_info and "max_total_num_tokens=65536"
    assert _state(capped)["memory_usage"]["token_capacity"] == 65536
    with caplog.at_level(logging.WARNING):
        roomy = plan_for(sim_env, ["--model-path", str(model_dir), "--max-total-tokens", str(profiled * 2)])
    assert roomy.max_total_num_tokens == profiled
    assert f"max_total_tokens={profiled * 2} is larger than the profiled value {profiled}" in caplog.text


def test_a_hybrid_model_shows_its_mamba_cache_chunk_size(sim_env: Env, model_dir: Path) -> None:
    assert _state(plan_for(sim_env, ["--model-path", str(model_dir)]))["_mamba_cache_chunk_size"] == 64
    paged = plan_for(sim_env, ["--model-path", str(model_dir), "--page-size", "128"])
    assert _state(paged)["_mamba_cache_chunk_size"] == 128  # max(chunk size, page size)


def test_a_model_without_a_mamba_cache_shows_no_chunk_size(sim_env: Env, model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    config.update(config.pop("text_config"), architectures=["LlamaForCausalLM"], model_type="llama")
    del config["vision_config"]
    (model_dir / "config.json").write_text(json.dumps(config))
    assert "_mamba_cache_chunk_size" not in _state(plan_for(sim_env, ["--model-path", str(model_dir)]))


def test_mamba_cache_chunk_size_follows_the_config(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "model_type": "falcon_h1"}))
    assert mamba_cache_chunk_size(load_model(str(model_dir)), 1) == 256  # FalconH1Config's default
    (model_dir / "config.json").write_text(
        json.dumps({**config, "model_type": "falcon_h1", "mamba_chunk_size": 128})
    )
    assert mamba_cache_chunk_size(load_model(str(model_dir)), 1) == 128
    (model_dir / "config.json").write_text(json.dumps({**config, "model_type": "lfm2"}))
    assert mamba_cache_chunk_size(load_model(str(model_dir)), 16) == 16  # LFM2 chunks by 1


def test_hierarchical_cache_host_pool(sim_env: Env, model_dir: Path) -> None:
    plain = plan_for(sim_env, ["--model-path", str(model_dir)])
    assert hicache_host_tokens(plain.settings, plain.model, plain.max_total_num_tokens) is None
    assert "hicache_host" not in _metrics(plain)

    sized = plan_for(
        sim_env, ["--model-path", str(model_dir), "--enable-hierarchical-cache", "--hicache-size", "2"]
    )
    total = 2_000_000_000 // KV_BYTES_PER_TOKEN + 1  # pool_host/base.py: GB / bytes per token, plus a page
    assert hicache_host_tokens(sized.settings, sized.model, sized.max_total_num_tokens) == total
    text = _metrics(sized)
    labels = '{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    assert f"sglang:hicache_host_total_tokens{labels} {float(total)!r}" in text
    assert f"sglang:hicache_host_used_tokens{labels} 0.0" in text
    assert text.index("sglang:is_cuda_graph{") < text.index("hicache_host_used_tokens")  # real 0.5.17's order

    ratio = plan_for(
        sim_env,
        [
            "--model-path",
            str(model_dir),
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "3",
            "--page-size",
            "64",
        ],
    )
    expected = (ratio.max_total_num_tokens * 3 // 64 + 1) * 64
    assert hicache_host_tokens(ratio.settings, ratio.model, ratio.max_total_num_tokens) == expected
