"""The packaged SGLang 0.5.23 facts file."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_simulator.facts import load_facts

DATA = Path(__file__).resolve().parents[2] / "simulator" / "src" / "sglang_simulator" / "data"


def test_file_is_sorted_and_versioned() -> None:
    raw = json.loads((DATA / "sglang-0.5.23.json").read_text())
    assert raw["sglang_version"] == "0.5.23"
    assert raw["architectures"] == sorted(raw["architectures"])
    assert raw["removed_environment"] == sorted(raw["removed_environment"])
    assert list(raw["renamed_flags"]) == sorted(raw["renamed_flags"])
    for flag in raw["flags"]:
        assert set(flag) >= {
            "option_strings",
            "dest",
            "nargs",
            "type",
            "choices",
            "default",
            "action",
            "required",
        }


def test_key_flags_and_defaults() -> None:
    facts = load_facts()
    by_option = {o: f for f in facts.flags for o in f.option_strings}
    assert by_option["--host"].default == "127.0.0.1"
    assert by_option["--port"].default == 30000
    assert by_option["--model"].dest == "model_path" and by_option["--model-path"].required
    assert by_option["--mem-fraction-static"].default is None  # auto
    assert by_option["--mamba-radix-cache-strategy"].choices == (
        "auto",
        "no_buffer",
        "extra_buffer",
        "extra_buffer_lazy",
    )
    assert by_option["--context-length"].type == "human_readable_int"
    assert by_option["--metrics-port"].provided_by == "smg-grpc-servicer"  # a plugin flag


def test_retired_names_are_really_gone() -> None:
    facts = load_facts()
    options = {o for f in facts.flags for o in f.option_strings}
    assert facts.renamed_flags["--cuda-graph-max-bs"] == "--cuda-graph-max-bs-decode"
    assert facts.renamed_flags["--mamba-scheduler-strategy"] == "--mamba-radix-cache-strategy"
    for old, new in facts.renamed_flags.items():
        assert old not in options and new.split("=")[0] in options
    assert "SGLANG_ENABLE_SPEC_V2" in facts.removed_environment
    assert "SGLANG_ENABLE_SPEC_V2" not in facts.environment_names


def test_models_and_speculative_algorithms() -> None:
    facts = load_facts()
    for arch in ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLMMTP", "LlamaForCausalLM"):
        assert arch in facts.architectures
    assert {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"} <= set(facts.speculative_algorithms)
    assert facts.speculative_algorithm_aliases == {"NEXTN": "EAGLE"}
