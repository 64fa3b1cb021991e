"""The simulator stands in for the release SGLANG_SIM_VERSION names (sglang-fleet: sglang_version)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import StartServer


def test_a_0_5_17_server(start_server: StartServer, model_dir: Path) -> None:
    server = start_server(
        [
            "--model-path",
            str(model_dir),
            "--tp-size",
            "2",
            "--skip-server-warmup",
            "--cuda-graph-max-bs",
            "8",
        ],
        SGLANG_SIM_VERSION="0.5.17",
    )
    server.wait_ready()
    info = server.get("/server_info").json()
    assert info["version"] == "0.5.17"
    assert info["cuda_graph_max_bs_decode"] == 8, "0.5.17's deprecated alias of --cuda-graph-max-bs-decode"
    assert "keep_mm_feature_on_device" in info and "enable_watermark" not in info, "0.5.17's own fields"


def test_the_default_is_0_5_23(start_server: StartServer, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir), "--tp-size", "2", "--skip-server-warmup"])
    server.wait_ready()
    info = server.get("/server_info").json()
    assert info["version"] == "0.5.23" and "enable_watermark" in info


# What each release's srt/entrypoints/http_server.py registers of the routes that came or went after
# 0.5.17, and whether srt/utils/auth.py decide_request_auth lets /ready through without the key (read in
# each release's wheel, 2026-12-05: `@app.get("/get_load")` up to 0.5.20; `@app.get("/ready")` and
# `path.startswith("/ready")` from 0.5.20 on).
ROUTES_BY_RELEASE = {
    "0.5.17": {"/get_load"},
    "0.5.18": {"/get_load"},
    "0.5.19": {"/get_load"},
    "0.5.20": {"/get_load", "/ready"},
    "0.5.21": {"/ready"},
    "0.5.22": {"/ready"},
    "0.5.23": {"/ready"},
}


@pytest.mark.parametrize("version", sorted(ROUTES_BY_RELEASE))
def test_each_release_serves_its_own_probe_routes(version: str) -> None:
    from sglang_simulator.facts import available_releases
    from sglang_simulator.server import has_ready, route_table

    assert version in available_releases()
    routes = set(route_table(version, enable_metrics=True))
    assert routes & {"/get_load", "/ready"} == ROUTES_BY_RELEASE[version]
    assert has_ready(version) == ("/ready" in ROUTES_BY_RELEASE[version])
