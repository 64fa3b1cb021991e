"""playbooks/bench.yml's filters: a router in front of several models is measured once per model, asked by name."""

from __future__ import annotations

from ansible_collections.sglang.fleet.plugins.filter.bench import sglang_bench_router_endpoints

URL = "http://127.0.0.1:30100"


def test_a_router_of_one_model_is_measured_once_and_of_several_once_per_model() -> None:
    one = [{"served_model_name": "qwen"}, {"served_model_name": "qwen"}]
    assert sglang_bench_router_endpoints(one, URL) == [{"name": "router", "url": URL, "model": ""}]
    two = [*one, {"served_model_name": "coder"}]
    assert sglang_bench_router_endpoints(two, URL) == [
        {"name": "router (coder)", "url": URL, "model": "coder"},
        {"name": "router (qwen)", "url": URL, "model": "qwen"},
    ]
