"""The KV pool's size (--max-total-tokens), the mamba cache of hybrid models, the hicache host pools.

The hybrid figures are those of the tiny Qwen3.5 (tests/fixtures/model_repo.py) launched with b200's flags,
which real SGLang 0.5.17 logged in tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/b200/server.log
(tests/contract/test_hicache_pools.py replays that launch).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fixtures import model_repo

from sglang_simulator import metrics, responses
from sglang_simulator.cache_pools import (
    gdn_shape,
    hicache_host_pools,
    hicache_host_tokens,
    kv_cache_lines,
    mamba_cache_chunk_size,
    mamba_pool_sizes,
    mamba_slots_per_request,
    resolve_max_num_reqs,
)
from sglang_simulator.checks import Plan
from sglang_simulator.engine import Engine
from sglang_simulator.errors import StartupError
from sglang_simulator.model import load_model

from .simkit import Env, make_model
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


def _llama(model_dir: Path) -> Path:
    config = json.loads((model_dir / "config.json").read_text())
    config.update(config.pop("text_config"), architectures=["LlamaForCausalLM"], model_type="llama")
    del config["vision_config"]
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


def test_hierarchical_cache_host_pool(sim_env: Env, model_dir: Path) -> None:
    plain = plan_for(sim_env, ["--model-path", str(model_dir)])
    assert hicache_host_tokens(plain.settings, plain.model, plain.max_total_num_tokens) is None
    assert hicache_host_pools(plain.settings, plain.model, plain.max_total_num_tokens) is None
    assert "hicache_host" not in _metrics(plain)

    dense = ["--model-path", str(_llama(model_dir)), "--enable-hierarchical-cache"]
    sized = plan_for(sim_env, [*dense, "--hicache-size", "2"])
    total = 2_000_000_000 // KV_BYTES_PER_TOKEN + 1  # pool_host/base.py: GB / bytes per token, plus a page
    assert hicache_host_tokens(sized.settings, sized.model, sized.max_total_num_tokens) == total
    pools = hicache_host_pools(sized.settings, sized.model, sized.max_total_num_tokens)
    assert pools is not None and (pools.mamba_slots, pools.draft_tokens) == (None, None)  # no mamba, no draft
    assert pools.log_lines() == [
        f"Allocating kv hierarchical KV host pool: {total} tokens, "
        f"{total * KV_BYTES_PER_TOKEN / 1e9:.2f} GB host memory."
    ]
    text = _metrics(sized)
    labels = '{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    assert f"sglang:hicache_host_total_tokens{labels} {float(total)!r}" in text
    assert f"sglang:hicache_host_used_tokens{labels} 0.0" in text
    assert text.index("sglang:is_cuda_graph{") < text.index("hicache_host_used_tokens")  # real 0.5.17's order

    ratio = plan_for(sim_env, [*dense, "--hicache-ratio", "3", "--page-size", "64"])
    expected = (ratio.max_total_num_tokens * 3 // 64 + 1) * 64
    assert hicache_host_tokens(ratio.settings, ratio.model, ratio.max_total_num_tokens) == expected


# -- a hybrid (gated delta net + full attention) model: the tiny Qwen3.5 with b200's flags ---------------

B200 = [
    *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"),
    *("--speculative-num-draft-tokens", "4", "--max-running-requests", "512", "--context-length", "8192"),
    *("--mamba-radix-cache-strategy", "extra_buffer", "--enable-hierarchical-cache", "--hicache-size", "2"),
    *("--mem-fraction-static", "0.08", "--max-total-tokens", "65536", "--max-mamba-cache-size", "256"),
]
# One rank of the tiny Qwen3.5: layer 1 full attention (2 KV heads of 32), layer 0 gated delta net with conv
# state (4 * 16 + 2 * 2 * 16 = 128, kernel 4 - 1) in bf16 and SSM state (4 value heads, 16, 16) in fp32.
KV_TOKEN = 1 * 2 * 32 * 2 * 2  # bytes per token, K and V: mha.py get_size_per_token
CONV_SLOT, SSM_SLOT = 128 * 3 * 2, 4 * 16 * 16 * 4
KV_DEVICE = 2 * (65536 + 1) * 1 * 2 * 32 * 2  # K and V buffers of (size + page, heads, head_dim)
SPEC_SLOTS, DRAFT_TOKENS = (
    51 + 1,
    4,
)  # spec_state_size = the capped max running requests, plus its padding slot
MAMBA_DEVICE = (256 + 1) * (CONV_SLOT + SSM_SLOT) + SPEC_SLOTS * DRAFT_TOKENS * (SSM_SLOT + CONV_SLOT)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    directory = make_model(tmp_path / "tiny-qwen3.5", total_size=8 << 20)
    (directory / "config.json").write_text(json.dumps(model_repo.config()))
    return directory


def _b200(sim_env: Env, tiny: Path, *extra: str) -> Plan:
    plan = plan_for(sim_env, ["--model-path", str(tiny), *B200, *extra])
    assert plan.max_total_num_tokens == 65536
    return plan


def test_the_hybrid_shape_follows_the_config(sim_env: Env, tiny: Path) -> None:
    plan = _b200(sim_env, tiny)
    shape = gdn_shape(plan.settings, plan.model)
    assert shape is not None
    assert (shape.full_layers, shape.mamba_layers, shape.kv_heads, shape.head_dim) == (1, 1, 2, 32)
    assert (shape.conv_dim, shape.conv_window, shape.temporal, shape.ssm_itemsize) == (128, 3, (4, 16, 16), 4)
    assert (shape.kv_bytes_per_token, shape.mamba_slot_bytes) == (KV_TOKEN, CONV_SLOT + SSM_SLOT)
    bf16 = gdn_shape({**plan.settings, "mamba_ssm_dtype": "bfloat16"}, plan.model)
    assert bf16 is not None and bf16.ssm_itemsize == 2
    tp2 = gdn_shape({**plan.settings, "tp_size": 2}, plan.model)
    assert tp2 is not None and (tp2.kv_heads, tp2.conv_dim, tp2.temporal) == (1, 64, (2, 16, 16))
    assert gdn_shape(plan.settings, load_model(str(_llama(make_model(tiny.parent / "llama"))))) is None


@pytest.mark.parametrize(
    ("strategy", "extra", "slots"),
    [
        ("extra_buffer", {}, 5),  # 3 + the ping-pong pair of the overlap schedule
        ("extra_buffer_lazy", {}, 4),
        ("extra_buffer", {"disable_overlap_schedule": True}, 4),
        ("no_buffer", {}, 3),
        ("extra_buffer", {"disable_radix_cache": True}, 1),
    ],
)
def test_mamba_state_slots_per_request(strategy: str, extra: dict[str, Any], slots: int) -> None:
    assert mamba_slots_per_request({"mamba_radix_cache_strategy": strategy, **extra}) == slots


def test_the_mamba_cache_caps_max_running_requests(sim_env: Env, tiny: Path) -> None:
    plan = _b200(sim_env, tiny)
    cap = resolve_max_num_reqs(plan.settings, plan.model, 65536)
    assert (cap.max_running_requests, cap.capped_by_mamba, cap.slots_per_request) == (51, True, 5)  # 256 // 5
    assert cap.warning() == (
        "max_running_requests is capped to 51 by the mamba state cache (max_mamba_cache_size=256, 5 state "
        "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
        "halve the state size with --mamba-ssm-dtype bfloat16."
    )
    roomy = resolve_max_num_reqs({**plan.settings, "max_running_requests": 40}, plan.model, 65536)
    assert (roomy.max_running_requests, roomy.capped_by_mamba, roomy.warning()) == (40, False, None)


def test_a_mamba_cache_too_small_for_one_request_fails_the_start(sim_env: Env, tiny: Path) -> None:
    with pytest.raises(
        StartupError, match=r"^RuntimeError: Hybrid \(mamba/linear-attention\) state cache is too small"
    ) as error:
        _b200(sim_env, tiny, "--max-mamba-cache-size", "4")  # 5 state slots a request
    assert "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0." in str(error.value)


def test_the_device_pools_of_a_hybrid_model(sim_env: Env, tiny: Path) -> None:
    plan = _b200(sim_env, tiny)
    mamba = mamba_pool_sizes(plan.settings, plan.model, 65536)
    assert mamba is not None
    assert (mamba.size, mamba.conv, mamba.temporal) == (256, 257 * CONV_SLOT, 257 * SSM_SLOT)
    assert mamba.intermediate_ssm == SPEC_SLOTS * DRAFT_TOKENS * SSM_SLOT
    # the windows of the 4 draft tokens share 4 + 3 - 1 columns as allocated, but count 4 * 3 by their view
    assert mamba.intermediate_conv == SPEC_SLOTS * (4 + 3 - 1) * 128 * 2
    assert mamba.size_bytes == MAMBA_DEVICE == 2_261_760
    assert mamba.log_line() == (
        "Mamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: 0.00GB, "
        "ssm_state size: 0.00GB intermediate_ssm_state_cache size: 0.00GB "
        "intermediate_conv_window_cache size: 0.00GB "
    )
    kv = "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.01 GB, V size: 0.01 GB"
    assert kv_cache_lines(plan.settings, plan.model, 65536) == [kv, kv]  # the target's, then the MTP draft's


def test_hicache_size_is_split_between_the_kv_and_mamba_host_pools(sim_env: Env, tiny: Path) -> None:
    plan = _b200(sim_env, tiny)
    pools = hicache_host_pools(plan.settings, plan.model, 65536)
    assert pools is not None
    kv_tokens = int(2 * KV_DEVICE / (KV_DEVICE + MAMBA_DEVICE) * 1e9 // KV_TOKEN) + 1
    mamba_slots = int(2 * MAMBA_DEVICE / (KV_DEVICE + MAMBA_DEVICE) * 1e9 // (CONV_SLOT + SSM_SLOT)) + 1
    assert (pools.kv_tokens, pools.mamba_slots, pools.draft_tokens) == (kv_tokens, mamba_slots, kv_tokens + 1)
    assert kv_tokens == 6_884_417  # real SGLang 0.5.17's, and the sglang:hicache_host_total_tokens gauge
    assert hicache_host_tokens(plan.settings, plan.model, 65536) == kv_tokens
    assert pools.log_lines() == [
        "Allocating kv hierarchical KV host pool: 6884417 tokens, 1.76 GB host memory.",
        "Allocating 0.24 GB host memory for hierarchical Mamba cache (layout=page_first).",
        "Allocating draft hierarchical KV host pool: 6884418 tokens, 1.76 GB host memory.",
        "HiCache draft KV registered: MHATokenToKVPool (host 6884418 slots)",
    ]


def test_hicache_ratio_sizes_each_host_pool_by_its_device_pool(sim_env: Env, tiny: Path) -> None:
    plan = _b200(sim_env, tiny, "--page-size", "64")
    settings = {**plan.settings, "hicache_size": 0, "hicache_ratio": 3}
    pools = hicache_host_pools(settings, plan.model, 65536)
    assert pools is not None
    kv_tokens = (65536 * 3 // 64 + 1) * 64  # no split: ratio times the device pool, plus a page
    assert (pools.kv_tokens, pools.mamba_slots) == (kv_tokens, 256 * 3 + 1)
    assert pools.draft_tokens == kv_tokens + 64  # the target host pool's slots as a ratio, plus a page
    assert hicache_host_pools({**settings, "speculative_algorithm": None}, plan.model, 65536) == replace(
        pools, draft_tokens=None, draft_bytes=None
    )
