"""Helpers for the SGLang simulator tests: GPU files, model dirs, live servers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixtures import model_repo

SRC = Path(__file__).resolve().parents[2] / "simulator" / "src"

GIB = 1_000_000_000
B200_MIB = 183359


@dataclass
class Env:
    """Paths and environment for one test: GPU list, state dir, knobs."""

    tmp: Path
    gpus_file: Path
    state_dir: Path
    vars: dict[str, str] = field(default_factory=dict)

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "SGL_"))}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(
            {
                "PYTHONPATH": str(SRC),
                "SGLANG_SIM_GPUS_FILE": str(self.gpus_file),
                "SGLANG_SIM_STATE_DIR": str(self.state_dir),
                "SGLANG_SIM_LOAD_SECONDS": "0.2",
                "SGLANG_SIM_WARMUP_SECONDS": "0.4",
                "SGLANG_SIM_HEALTH_SECONDS": "0",
                "SGLANG_SIM_TOKEN_SECONDS": "0.0005",
                "SGLANG_SIM_STOP_SECONDS": "0.2",  # real SGLang takes ~6 s from SIGTERM to its self-SIGKILL
            }
        )
        env.update(self.vars)
        env.update(extra)
        return env


def write_gpus(path: Path, count: int = 2, memory_mib: int = B200_MIB, name: str = "NVIDIA B200") -> None:
    gpus = [
        {
            "index": i,
            "name": name,
            "memory_total_mib": memory_mib,
            "uuid": f"GPU-5e1a0000-0000-4000-8000-{i:012d}",
        }
        for i in range(count)
    ]
    path.write_text(json.dumps({"driver_version": "580.95.05", "cuda_version": "13.0", "gpus": gpus}))


def make_model(
    directory: Path,
    *,
    architecture: str = "Qwen3_5ForConditionalGeneration",
    total_size: int = 54 * GIB,
    mtp: bool = True,
    shards: int = 2,
    processor: bool = True,
) -> Path:
    """A Qwen3.6-27B-shaped checkpoint: config, index, sparse shard files, and (`processor`) the image
    processor and chat template a multimodal checkpoint needs to start (the generated test repository's)."""
    directory.mkdir(parents=True, exist_ok=True)
    if processor:
        (directory / "preprocessor_config.json").write_text(json.dumps(model_repo.preprocessor_config()))
        (directory / "chat_template.jinja").write_text(model_repo.CHAT_TEMPLATE)
    config = {
        "architectures": [architecture],
        "model_type": "qwen3_5",
        "eos_token_id": 248044,
        "text_config": {
            "num_hidden_layers": 64,
            "num_attention_heads": 24,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "hidden_size": 5120,
            "full_attention_interval": 4,
            "max_position_embeddings": 262144,
            "mtp_num_hidden_layers": 1,
        },
        "vision_config": {"depth": 27, "hidden_size": 1152},
    }
    (directory / "config.json").write_text(json.dumps(config))
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {
        "model.language_model.embed_tokens.weight": names[0],
        "model.language_model.layers.0.mlp.down_proj.weight": names[0],
        "lm_head.weight": names[-1],
    }
    if mtp:
        weight_map["mtp.fc.weight"] = names[-1]
        weight_map["mtp.layers.0.mlp.down_proj.weight"] = names[-1]
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in names:
        with (directory / name).open("wb") as fh:
            os.truncate(fh.fileno(), total_size // shards)  # sparse: no disk used
    return directory


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    port: int,
    path: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Response:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Response(resp.status, resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Response(exc.code, exc.read(), dict(exc.headers))


class Server:
    """A simulator process on 127.0.0.1:<port>."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_simulator", *args],
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._output: str | None = None

    def get(self, path: str, **kwargs: Any) -> Response:
        return http(self.port, path, **kwargs)

    def wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited early: {self.stop()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise AssertionError("simulator never listened")

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.get("/health", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"simulator never became healthy: {self.stop()}")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        """Stop (if running) and return everything it wrote to stderr."""
        if self._output is None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                _, err = self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            self._output = err
        return self._output


def run_sim(
    module: str, args: Sequence[str], env: Mapping[str, str], timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
