"""Settings as command-line words: one rule for SGLang's flags (the plan) and the router's extra args."""

from __future__ import annotations

from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_flags
from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name, render_flag


def test_a_setting_becomes_its_flag_words() -> None:
    assert render_flag("--trust-remote-code", True) == ["--trust-remote-code"]
    assert render_flag("--x", False) == [] and render_flag("--x", None) == []
    assert render_flag("--mem-fraction-static", 0.9) == ["--mem-fraction-static", "0.9"]
    assert render_flag("--lora-paths", ["a", "b"]) == ["--lora-paths", "a", "b"]
    assert render_flag("--json-model-override-args", {"b": 1, "a": [2]}) == ["--json-model-override-args", '{"a": [2], "b": 1}']


def test_sglang_spells_a_key_with_dashes() -> None:
    assert flag_name("cuda_graph_max_bs") == "--cuda-graph-max-bs" and flag_name("--port") == "--port"


def test_the_router_keeps_its_spelling_and_its_values_as_text() -> None:
    extra = {"worker-startup-timeout-secs": 30, "--enable-igw": True, "log_json": False, "ids": [1, 2.5]}
    assert sglang_router_flags(extra) == ["--enable-igw", "--ids", "1", "2.5", "--worker-startup-timeout-secs", "30"]
