"""The simulator stands in for the release SGLANG_SIM_VERSION names (sglang-fleet: sglang_version)."""

from __future__ import annotations

from pathlib import Path

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
