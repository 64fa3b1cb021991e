"""Fixtures for the SGLang simulator tests (helpers live in simkit.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from .simkit import Env, Server, free_port, make_model, write_gpus

StartServer = Callable[..., Server]


@pytest.fixture
def sim_env(tmp_path: Path) -> Env:
    gpus_file = tmp_path / "gpus.json"
    write_gpus(gpus_file)
    return Env(tmp=tmp_path, gpus_file=gpus_file, state_dir=tmp_path / "state")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return make_model(tmp_path / "Qwen3.6-27B")


@pytest.fixture
def start_server(sim_env: Env) -> Iterator[StartServer]:
    servers: list[Server] = []

    def start(args: Sequence[str], **extra_env: str) -> Server:
        port = free_port()
        server = Server(
            [*args, "--host", "127.0.0.1", "--port", str(port)], sim_env.environ(**extra_env), port
        )
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop(signal.SIGKILL)
