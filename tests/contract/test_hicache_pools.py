"""The hierarchical cache's host pools of a hybrid model: the simulator against real SGLang 0.5.17 on an H200.

tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/ (README.md there) holds b200's launch of the tiny Qwen3.5
(gated delta net + full attention, one MTP layer; tests/fixtures/model_repo.py) with
``--enable-hierarchical-cache --hicache-size 2 --mamba-radix-cache-strategy extra_buffer --max-total-tokens 65536
--max-mamba-cache-size 256`` and EAGLE 3/1/4. Real SGLang split the 2 GB between the KV and the mamba host pools
in proportion to their device pools, capped the running requests by the mamba cache, and gave the draft a host
pool one page larger than the target's. The launch is replayed here on the recorded model (recordings.Workspace),
and held to what real SGLang logged and answered:

* ``sglang:hicache_host_total_tokens`` of /metrics, exactly;
* every cache-sizing line of the recorded log, as cache_pools.py writes it from what the replayed server reports
  (its /server_info, its model, its KV pool);
* the replayed server's own log: the launcher writes each of these lines as often as real SGLang did.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from sglang_simulator import cache_pools
from sglang_simulator.model import ModelInfo, load_model

from .recordings import RECORDINGS, Recording, Replay, Scenario, Workspace, replay, strip_prefix

FOLDER = RECORDINGS / "sglang-0.5.17-h200-tiny-qwen3.5"
RECORDING = Recording(FOLDER)
B200: Scenario = {s.name: s for s in RECORDING.scenarios()}["b200"]
_TIMESTAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")
# What real SGLang 0.5.17 logged, in this order (b200/server.log).
RECORDED = (
    "max_running_requests is capped to 51 by the mamba state cache (max_mamba_cache_size=256, 5 state slots per "
    "request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size "
    "with --mamba-ssm-dtype bfloat16.",
    "Mamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: 0.00GB, ssm_state size: 0.00GB "
    "intermediate_ssm_state_cache size: 0.00GB intermediate_conv_window_cache size: 0.00GB ",
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.01 GB, V size: 0.01 GB",
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.01 GB, V size: 0.01 GB",
    "Allocating kv hierarchical KV host pool: 6884417 tokens, 1.76 GB host memory.",
    "Allocating 0.24 GB host memory for hierarchical Mamba cache (layout=page_first).",
    "Allocating draft hierarchical KV host pool: 6884418 tokens, 1.76 GB host memory.",
    "HiCache draft KV registered: MHATokenToKVPool (host 6884418 slots)",
)
UNIQUE = list(dict.fromkeys(RECORDED))
SIZING = re.compile(r"^(max_running_requests is capped|(Mamba|KV) Cache is allocated|Allocating .*hierarchical|HiCache draft)")


def log_lines(text: str) -> list[str]:
    """A log's lines without the driver's and the logger's time prefixes."""
    return [_TIMESTAMP.sub("", strip_prefix(line)) for line in text.splitlines()]


def gauge(metrics_text: str, name: str) -> float:
    """The value of one unlabelled-by-us sample of ``sglang:<name>`` (one rank, one sample)."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines() if line.startswith(f"sglang:{name}{{")]
    assert len(values) == 1, (name, values)
    return values[0]


@cache
def replayed(workspace_root: str) -> Replay:
    return replay(B200, Workspace(Path(workspace_root), RECORDING))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Replay:
    return replayed(str(tmp_path_factory.mktemp("hicache-pools")))


def simulated(run: Replay) -> tuple[dict[str, Any], ModelInfo, int]:
    """What the replayed server runs with: its ServerArgs (/server_info), its model directory, its KV pool."""
    body: dict[str, Any] = run.server_info["after"].json()
    return body, load_model(str(body["model_path"])), int(body["max_total_num_tokens"])


def expected_lines(run: Replay) -> list[str]:
    """The cache-sizing lines cache_pools.py writes for the replayed server, in real SGLang's order."""
    settings, model, tokens = simulated(run)
    cap = cache_pools.resolve_max_num_reqs(settings, model, tokens)
    mamba = cache_pools.mamba_pool_sizes(settings, model, tokens)
    kv = cache_pools.kv_cache_lines(settings, model, tokens)
    host = cache_pools.hicache_host_pools(settings, model, tokens)
    assert mamba is not None and kv is not None and host is not None
    warning = cap.warning()
    return [*([warning] if warning else []), mamba.log_line(), *kv, *host.log_lines()]


def test_the_recording_holds_the_lines() -> None:
    assert RECORDING.version == "0.5.17"
    assert B200.recorded_model is not None, "models/listing.json lacks the launched model"
    for flag in ("--enable-hierarchical-cache", "--hicache-size", "--max-mamba-cache-size", "--max-total-tokens"):
        assert flag in B200.args
    assert [line for line in log_lines(B200.log) if SIZING.search(line)] == list(RECORDED)


def test_the_replayed_server_reports_the_recorded_pools(run: Replay) -> None:
    settings, model, tokens = simulated(run)
    real = B200.server_info["after"]["body"]
    keys = ("max_total_num_tokens", "hicache_size", "hicache_mem_layout", "max_mamba_cache_size",
            "mamba_radix_cache_strategy", "speculative_num_draft_tokens", "speculative_eagle_topk",
            "uses_mamba_radix_cache")  # fmt: skip
    assert {k: settings[k] for k in keys} == {k: real[k] for k in keys}
    # The running requests the mamba cache allows (its 256 slots, 5 a request), as the scheduler reports them.
    scheduler = ("effective_max_running_requests_per_dp", "max_running_requests")
    simulated_state, real_state = settings["internal_states"][0], real["internal_states"][0]
    assert {k: simulated_state[k] for k in scheduler} == {k: real_state[k] for k in scheduler}
    assert tokens == 65536 and model.architecture == "Qwen3_5ForConditionalGeneration"


def test_the_host_pool_gauge_is_the_recorded_one(run: Replay) -> None:
    real = gauge(B200.metrics[""], "hicache_host_total_tokens")
    assert real == 6_884_417
    assert gauge(run.metrics[""], "hicache_host_total_tokens") == real


def test_cache_pools_writes_every_recorded_line(run: Replay) -> None:
    """Tokens, slots and GB exactly as real SGLang formatted them, from the replayed server's own settings."""
    assert expected_lines(run) == list(RECORDED)
    settings, model, tokens = simulated(run)
    cap = cache_pools.resolve_max_num_reqs(settings, model, tokens)
    real = B200.server_info["after"]["body"]["internal_states"][0]
    assert cap.max_running_requests == real["effective_max_running_requests_per_dp"] == 51


@pytest.mark.parametrize("line", UNIQUE, ids=[re.sub(r"\W+", "-", line[:40]).strip("-") for line in UNIQUE])
def test_the_simulator_logs_the_recorded_line(run: Replay, line: str) -> None:
    simulated_lines = [text for text in log_lines(run.log) if SIZING.search(text)]
    assert simulated_lines.count(line) == RECORDED.count(line), simulated_lines
