"""Node rank 1 of 2 whose rank 0 never starts: real SGLang 0.5.17 against the simulator (issue 43).

tests/recordings/sglang-0.5.17-h100-multinode-rank1/ (tests/hardware/multinode_rank1.py, README.md there) holds two
real servers launched as rank 1 of 2 with the rendezvous at a port nothing listens on: one with --dist-timeout 20, one
without. The simulator is started here with the recorded command line (the sandbox's model generated again, its own
ports, --dist-timeout 1) and held to what they did: its HTTP port refuses every connection, the rendezvous fails with
torch's message naming the timeout and the address, and the server ends itself with SIGKILL; without --dist-timeout it
waits on, with torch's default for NCCL as its timeout.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

from fixtures import model_repo
from simulator.simkit import Env, Server, free_port, write_gpus

from .recordings import RECORDINGS

FOLDER = RECORDINGS / "sglang-0.5.17-h100-multinode-rank1"
EXITS: dict[str, Any] = json.loads((FOLDER / "exits.json").read_text())
TIMEOUT20 = "tp2-nnodes2-rank1-timeout20"
DEFAULT = "tp2-nnodes2-rank1-default"
PREFIX = re.compile(r"^\[\+ *[\d.]+s\] (\[[\d :-]+( TP\d+)?\] )?")


def recorded_lines(name: str) -> list[str]:
    lines = (FOLDER / f"{name}.server.log").read_text().splitlines()
    return [PREFIX.sub("", line) for line in lines if not line.startswith("#")]


def simulated(argv: list[str], tmp: Path, timeout: str | None) -> tuple[list[str], int, int]:
    """The recorded argv on this test's model and ports (and --dist-timeout `timeout`, or none); (argv, HTTP port,
    rendezvous port)."""
    args = list(argv)
    port, rendezvous = free_port(), free_port()
    model_repo.build_repo(tmp / "tiny-qwen3.5", 1)
    args[args.index("--model-path") + 1] = str(tmp / "tiny-qwen3.5")
    args[args.index("--port") + 1] = str(port)
    args[args.index("--nccl-port") + 1] = str(free_port())
    args[args.index("--dist-init-addr") + 1] = f"127.0.0.1:{rendezvous}"
    if "--dist-timeout" in args:
        at = args.index("--dist-timeout")
        del args[at : at + 2]
    if timeout is not None:
        args += ["--dist-timeout", timeout]
    return args, port, rendezvous


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def environment(tmp: Path) -> dict[str, str]:
    gpus = tmp / "gpus.json"
    write_gpus(gpus, count=1, memory_mib=81559, name="NVIDIA H100 80GB HBM3")
    return Env(tmp=tmp, gpus_file=gpus, state_dir=tmp / "state").environ()


def test_rank_1_without_its_rank_0_ends_as_recorded(tmp_path: Path) -> None:
    recorded = EXITS[TIMEOUT20]
    argv, port, rendezvous = simulated(recorded["argv"], tmp_path, "1")
    assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--nnodes") + 1] == "2"
    server = Server(argv, environment(tmp_path), port)
    answers = []
    while server.proc.poll() is None:
        answers.append(refused(port))
        time.sleep(0.2)
    assert server.proc.returncode == recorded["returncode"] == -signal.SIGKILL
    # Its port refused every connection until it ended, as the real one's did (it never got to its health server).
    assert all(answers) and answers
    assert {change["status"] for path in recorded["health"]["changes"].values() for change in path} == {"refused"}
    lines = recorded_lines(TIMEOUT20)
    output = [PREFIX.sub("", re.sub(r"^\[[\d :-]+( TP\d+)?\] ", "", line)) for line in server.stop().splitlines()]
    [error] = [line for line in lines if line.startswith("torch.distributed.DistNetworkError")]
    assert error == (
        "torch.distributed.DistNetworkError: The client socket has timed out after 20000ms while trying to connect to"
        " (127.0.0.1, 30150)."
    )
    assert error.replace("20000ms", "1000ms").replace("30150", str(rendezvous)) in output
    for line in (
        "Init torch distributed begin.",
        "Scheduler hit an exception: Traceback (most recent call last):",
        "Received sigquit from a child process. It usually means the child failed.",
    ):
        assert line in lines and line in output, line
    ending = [line for line in lines if line.startswith("kill_process_tree called")][-1]
    assert "include_parent=True" in ending
    assert re.sub(r"\d+", "N", ending) == re.sub(r"\d+", "N", output[-1])


def test_without_a_dist_timeout_rank_1_waits_on_with_torchs_nccl_default(tmp_path: Path) -> None:
    from sglang_simulator import rendezvous

    recorded = EXITS[DEFAULT]
    assert "--dist-timeout" not in recorded["argv"]
    # Real: still at the rendezvous when the call's budget ended; torch's default for NCCL there: 600 s.
    assert recorded["returncode"] is None and recorded["still_running_at_s"] > 240
    assert rendezvous.DEFAULT_TIMEOUT == EXITS["torch_default_timeouts_s"]["default_pg_nccl_timeout"] == 600
    argv, port, _ = simulated(recorded["argv"], tmp_path, None)
    server = Server(argv, environment(tmp_path), port)
    time.sleep(3)
    assert server.proc.poll() is None and refused(port)
    assert "Init torch distributed begin." in server.stop(signal.SIGKILL)
