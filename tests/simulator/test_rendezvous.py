"""SGLang's multi-node start as the simulator plays it (sglang_simulator/rendezvous.py): rank 0 waits at the
rendezvous for the other nodes, a missing node fails its start after --dist-timeout with torch's message, a
node of another rank answers /health alone, and a node whose peer goes away crashes (Gloo's "Connection closed
by peer", read in SGLang 0.5.17's source). The rank 0 start with its peer missing is pinned by its recording.
"""

from __future__ import annotations

import json
import re
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
    assert "Connection closed by peer [127.0.0.1]:" in rank0.stop()


def test_a_node_that_goes_while_rank_0_loads_fails_rank_0s_start(
    start_server: Start, model_dir: Path, sim_env: Env
) -> None:
    """The weights load with collectives too: a peer stopped then fails rank 0's launch (from the source)."""
    rendezvous = free_port()
    rank0 = start_server(node_args(model_dir, 0, rendezvous, 30), SGLANG_SIM_LOAD_SECONDS="30")
    rank1 = start_server(
        node_args(model_dir, 1, rendezvous, 30), SGLANG_SIM_STATE_DIR=str(sim_env.tmp / "node1")
    )
    rank1.wait_ready()
    rank1.stop()
    assert rank0.proc.wait(timeout=10) == -signal.SIGKILL
    output = rank0.stop()
    assert "Connection closed by peer [127.0.0.1]:" in output
    assert "Received sigquit from a child process. It usually means the child failed." in output


def test_a_missing_node_fails_rank_0_after_the_timeout_with_torchs_message(
    start_server: Start, model_dir: Path
) -> None:
    rank0 = start_server(node_args(model_dir, 0, free_port(), 1))
    assert rank0.proc.wait(timeout=15) == -signal.SIGKILL
    assert (
        "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined."
        in rank0.stop()
    )


RECORDING = Path(__file__).resolve().parents[1] / "recordings/sglang-0.5.17-h100-multinode-missing-node"


def recorded(name: str) -> tuple[list[str], int]:
    """A recorded server's log lines (the `[+ seconds]` prefix and timestamps cut) and its exit status."""
    lines = (RECORDING / f"{name}.server.log").read_text().splitlines()
    text = [re.sub(r"^\[\+ *[\d.]+s\] ", "", line) for line in lines if not line.startswith("#")]
    exits = json.loads((RECORDING / "exits.json").read_text())
    return [re.sub(r"^\[[\d :-]+( TP\d+)?\] ", "", line) for line in text], int(exits[name]["returncode"])


def test_rank_0_with_its_peer_missing_ends_as_recorded(start_server: Start, model_dir: Path) -> None:
    lines, status = recorded("tp2-nnodes2-rank0")
    # --dist-timeout 60 recorded; the simulator is given 1 (the message counts the seconds it waited, plus 1).
    rank0 = start_server(node_args(model_dir, 0, free_port(), 1))
    assert rank0.proc.wait(timeout=15) == status == -signal.SIGKILL
    output = [re.sub(r"^\[[\d :-]+( TP\d+)?\] ", "", line) for line in rank0.stop().splitlines()]
    for line in (
        "Init torch distributed begin.",
        "Scheduler hit an exception: Traceback (most recent call last):",
        "Received sigquit from a child process. It usually means the child failed.",
    ):
        assert line in lines and line in output
    [error] = [line for line in lines if line.startswith("torch.distributed.DistStoreError")]
    assert (
        error == "torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients."
        " 1/2 clients joined."
    )
    assert error.replace("61 seconds", "2 seconds") in output
    ending = [line for line in lines if line.startswith("kill_process_tree called")][-1]
    assert re.sub(r"\d+", "N", ending) == re.sub(r"\d+", "N", output[-1])


def test_tensor_parallel_that_does_not_divide_over_the_nodes_is_refused_as_recorded(
    start_server: Start, model_dir: Path
) -> None:
    lines, status = recorded("tp1-nnodes2-rank0")
    args = node_args(model_dir, 0, free_port(), 60)
    args[args.index("--tp-size") + 1] = "1"
    node = start_server(args)
    assert node.proc.wait(timeout=15) == status == 1
    output = node.stop().splitlines()
    assert output[-1] == lines[-1] == "AssertionError: tp_size must be divisible by number of nodes"
    assert any("kill_process_tree called" in line and "include_parent=False" in line for line in output)


def test_a_node_retries_when_a_stopping_rank_0_drops_its_connection() -> None:
    """All nodes restart together: the old rank 0 may still accept and then drop the new node's connection."""
    import socket
    import threading

    from sglang_simulator import rendezvous

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def old_then_new_rank_0() -> None:
        dropped, _ = listener.accept()
        dropped.close()  # the stopping rank 0
        joined, _ = listener.accept()
        assert joined.makefile("r").readline().strip() == "1"
        joined.sendall(b"ready\n")

    threading.Thread(target=old_then_new_rank_0, daemon=True).start()
    node = rendezvous.Node(rank=1, nnodes=2, host="127.0.0.1", port=port, timeout=10, per_node=1, world=2)
    rendezvous.join(node, lambda: False)
    assert len(node.peers) == 1
    rendezvous.close(node)
    listener.close()
