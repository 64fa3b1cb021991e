"""Filters of playbooks/bench.yml: a measured endpoint from a script result, and a one-line summary."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def sglang_bench_endpoint(result: dict[str, Any], host: str) -> dict[str, Any]:
    """The JSON bench_client.py printed, named by host and instance (or router)."""
    measured: dict[str, Any] = json.loads(result["stdout"])
    return {"name": f"{host}/{result['item']['name']}", **measured}


def sglang_bench_router_endpoints(instances: list[dict[str, Any]], url: str) -> list[dict[str, str]]:
    """The router's endpoints to measure: the router itself, or, in front of several models (it routes by model name),
    the router once per model, asked by name."""
    models = sorted({str(instance.get("served_model_name") or "") for instance in instances})
    if len(models) < 2:
        return [{"name": "router", "url": url, "model": ""}]
    return [{"name": f"router ({model})", "url": url, "model": model} for model in models]


def sglang_bench_summary(endpoint: dict[str, Any]) -> str:
    levels = ", ".join(
        f"c={r['concurrency']}: {r['tokens_per_second']} tok/s ({r['failed']} failed)" for r in endpoint["results"]
    )
    accept = endpoint.get("accept_length")
    return f"{endpoint['name']}: {levels}" + (f", accept length {accept:.2f}" if accept is not None else "")


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_bench_endpoint": sglang_bench_endpoint,
            "sglang_bench_router_endpoints": sglang_bench_router_endpoints,
            "sglang_bench_summary": sglang_bench_summary,
        }
