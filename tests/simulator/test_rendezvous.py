"""SGLang's multi-node start as the simulator plays it (sglang_simulator/rendezvous.py): rank 0 waits at the
rendezvous for the other nodes, a missing node fails its start after --dist-timeout with torch's message, a
node of another rank answers /health alone, and a node whose peer goes away crashes. Read in SGLang 0.5.17's
source; to be pinned by issue 42's recording of a node rank 0 of 2 with its peer missing.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from .simkit import Env, Server, free_port

Start = Callable[..., Server]


def node_args(model_dir: Path, rank: int, port: int, timeout: int) -> list[str]:
    return [
        "--model-path", str(model_dir), "--tp-size", "2", "--nnodes", "2", "--node-rank", str(rank),
        "--dist-init-addr", f"127.0.0.1:{port}", "--dist-timeout", str(timeout),
    ]  # fmt: skip


def test_rank_0_waits_for_the_other_node_then_serves_and_fails_when_it_goes(
    start_server: Start, model_dir: Path, sim_env: Env
) -> None:
    rendezvous = free_port()
    rank0 = start_server(node_args(model_dir, 0, rendezvous, 30))
    time.sleep(1.0)
    # Still at the rendezvous: nothing listens on its HTTP port yet.
    assert rank0.proc.poll() is None
    try:
        rank0.get("/health", timeout=0.5)
        raise AssertionError("rank 0 answered before the other node joined")
    except OSError:
        pass
    # Each node its own GPU accounting (its own host).
    rank1 = start_server(
        node_args(model_dir, 1, rendezvous, 30), SGLANG_SIM_STATE_DIR=str(sim_env.tmp / "node1")
    )
    rank0.wait_ready()
    rank1.wait_ready()
    assert rank1.get("/health_generate").status == 200
    assert rank1.get("/server_info").status == 404
    assert rank0.get("/server_info").status == 200
    rank1.stop()
    rank0.proc.wait(timeout=10)
    assert "a peer node left the process group" in rank0.stop()


def test_a_missing_node_fails_rank_0_after_the_timeout_with_torchs_message(
    start_server: Start, model_dir: Path
) -> None:
    rank0 = start_server(node_args(model_dir, 0, free_port(), 1))
    assert rank0.proc.wait(timeout=15) == -signal.SIGKILL
    assert (
        "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined."
        in rank0.stop()
    )
