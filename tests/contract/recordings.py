"""Recordings of real SGLang (tests/recordings/<folder>/) and their replay against the simulator.

Two layouts are read, so a new folder is picked up without code changes:

* flat (``sglang-0.5.17-h200/``, written by its ``scripts/driver.py``): ``http.<scenario>.json`` (the exchanges,
  in order), ``server_info.<scenario>[.<stage>].json`` and ``get_server_info.<scenario>.json``,
  ``metrics.<scenario>[.<stage>].txt``, ``logs/<key>.server.log`` and ``timeline.json`` (per log key: health
  transitions, shutdown, launches that ended by themselves). An optional ``contract.json`` names logs whose file
  name differs from their timeline key (``{"logs": {"<timeline key>": "<log path>"}}``).
* per scenario (``tests/hardware/driver.py``, the project's own pipeline): ``<tag>/server.log``,
  ``<tag>/health.json``, ``<tag>/server_info.<stage>.json``, ``<tag>/metrics.txt``, other ``<tag>/*.json``
  exchanges (``url``, ``method``, ``request``, ``status``, ``headers``, ``body``), and ``summary.json`` (the
  SIGTERM exit status of each served tag, and ``stages.failures.<tag>`` for launches that must fail).

Every log starts with a ``# cmd:`` line: the launch command the simulator is started with. The simulator gets a
stand-in model (config and index, sparse shards); when the folder has ``models/listing.json`` (written by
tests/hardware/nextn_without_mtp.py: each generated model's ``config.json`` and ``model.safetensors.index.json``), the
stand-in of a model named there copies its config and tensor names, so the simulator sees the checkpoint real SGLang
saw (an MTP layer or none).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from simulator.simkit import Env, free_port, write_gpus

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "tests" / "recordings"
_DRIVER_PREFIX = re.compile(r"^\[\+\s*[\d.]+s\] ?")
# A server process the stand-in starts: fast phases; the SIGTERM path keeps its shape but not its 6 s.
FAST = {
    "SGLANG_SIM_LOAD_SECONDS": "0.3",
    "SGLANG_SIM_WARMUP_SECONDS": "0.3",
    "SGLANG_SIM_HEALTH_SECONDS": "0.02",
    "SGLANG_SIM_TOKEN_SECONDS": "0.0002",
    "SGLANG_SIM_STOP_SECONDS": "0.3",
}
WEIGHTS_BYTES = 8 << 20  # big enough that --mem-fraction-static 0.00001 of an H200 cannot hold it


def simulator_versions() -> list[str]:
    """Releases the simulator has a table for (SGLANG_SIM_VERSION)."""
    from sglang_simulator import facts

    available = getattr(facts, "available_releases", None)
    return list(available()) if available else [facts.SGLANG_VERSION]


def strip_prefix(line: str) -> str:
    return _DRIVER_PREFIX.sub("", line)


def launch_args(log_text: str) -> list[str]:
    """The arguments after ``sglang.launch_server`` / ``sglang serve`` on the log's ``# cmd:`` line."""
    for line in log_text.splitlines():
        if line.startswith("# cmd:"):
            try:
                words = shlex.split(line[len("# cmd:") :])
            except ValueError:  # written unquoted
                words = line[len("# cmd:") :].split()
            for marker in ("sglang.launch_server", "serve"):
                if marker in words:
                    return words[words.index(marker) + 1 :]
    raise ValueError("no '# cmd:' line with the launch command")


def _replace_value(args: list[str], flag: str, value: str | None) -> list[str]:
    out: list[str] = []
    skip = False
    for index, word in enumerate(args):
        if skip:
            skip = False
            continue
        if word == flag:
            skip = index + 1 < len(args)
            if value is not None:
                out += [flag, value]
        elif word.startswith(flag + "="):
            if value is not None:
                out += [flag, value]
        else:
            out.append(word)
    return out


def _flag_value(args: list[str], flag: str) -> str | None:
    for index, word in enumerate(args):
        if word == flag and index + 1 < len(args):
            return args[index + 1]
        if word.startswith(flag + "="):
            return word[len(flag) + 1 :]
    return None


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int | str | None
    headers: dict[str, str]
    json: Any = None
    text: str | None = None
    stream: list[str] | None = None

    @property
    def media_type(self) -> str | None:
        value = {k.lower(): v for k, v in self.headers.items()}.get("content-type")
        return value.split(";", 1)[0].strip().lower() if value else None

    @property
    def empty(self) -> bool:
        if self.stream is not None:
            return not any(self.stream)
        if self.json is not None:
            return False
        return not self.text

    @classmethod
    def recorded(cls, raw: dict[str, Any]) -> Exchange:
        path = raw.get("path")
        if path is None:
            parts = urllib.parse.urlsplit(str(raw.get("url", "")))
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        return cls(
            method=raw["method"],
            path=path,
            body=raw.get("request_body", raw.get("request")),
            status=raw.get("status"),
            headers=dict(raw.get("headers") or {}),
            json=raw.get("body"),
            text=raw.get("body_text"),
            stream=raw.get("stream_lines"),
        )

    @property
    def placeholder(self) -> bool:
        """An entry the driver replaced by a note (its body is in a file of its own)."""
        return isinstance(self.json, dict) and "_note" in self.json


def _normalize_health(transitions: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Health transitions with one spelling of "nothing listens" (``connection_refused``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path, steps in transitions.items():
        out[path] = [
            {**step, "status": "connection_refused" if step["status"] in ("refused", "connection_refused") else step["status"]}
            for step in steps
        ]
    return out


@dataclass
class Scenario:
    """One recorded server: its launch log, the exchanges in order, whole replies by stage, health and exit."""

    recording: Recording
    name: str
    log_path: Path
    exchanges: list[Exchange]
    server_info: dict[str, dict[str, Any]]  # stage ('' or 'after...' = after the requests, 'before') -> exchange
    get_server_info: dict[str, dict[str, Any]]
    metrics: dict[str, str]  # stage ('before...' = before the requests) -> text
    timeline: dict[str, Any]  # {"health_transitions": {path: [...]}, "shutdown": {"returncode": ...}}

    @property
    def id(self) -> str:
        return f"{self.recording.name}/{self.name}"

    @cached_property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @cached_property
    def args(self) -> list[str]:
        return launch_args(self.log)

    @property
    def architecture(self) -> str:
        match = re.search(r"Load weight end\..*?type=(\w+)", self.log)
        return match.group(1) if match else "Qwen3ForCausalLM"

    @property
    def recorded_model(self) -> dict[str, Any] | None:
        """The launched model's recorded config and index (``models/listing.json``), when the folder has them."""
        return self.recording.listed_model(self.args)

    @property
    def model_type(self) -> str:
        for exchange in self.exchanges:
            if exchange.path == "/model_info" and isinstance(exchange.json, dict):
                return str(exchange.json.get("model_type") or "qwen3")
        return "qwen2" if "MiMo" in self.architecture else "qwen3"


@dataclass
class Failure:
    """A launch that ended by itself (bad flag, impossible memory setting)."""

    recording: Recording
    key: str
    log_path: Path
    returncode: int

    @property
    def id(self) -> str:
        return f"{self.recording.name}/{self.key}"

    @cached_property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def listened(self) -> bool:
        """Whether it answered HTTP before it ended (a failed warm-up does; a failed start does not), from its
        health changes when the recording has them."""
        health = self.log_path.parent / "health.json"
        changes = _json(health).get("changes", {}) if health.exists() else {}
        return any(step.get("status") not in ("refused", "connection_refused") for steps in changes.values()
                   for step in steps)

    @property
    def recorded_model(self) -> dict[str, Any] | None:
        return self.recording.listed_model(launch_args(self.log))

    @property
    def error_lines(self) -> list[str]:
        """The lines that say why it failed: ``XError: ...`` and argparse's ``prog: error: ...``."""
        lines = [strip_prefix(line) for line in self.log.splitlines()]
        return [line for line in lines if re.match(r"^(\w+(Error|Exception)|sglang serve: error): ", line)]


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


class Recording:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        contract = path / "contract.json"
        self.contract: dict[str, Any] = _json(contract) if contract.exists() else {}

    @cached_property
    def timeline(self) -> dict[str, Any]:
        path = self.path / "timeline.json"
        data: dict[str, Any] = _json(path) if path.exists() else {}
        return data

    @cached_property
    def summary(self) -> dict[str, Any]:
        path = self.path / "summary.json"
        data: dict[str, Any] = _json(path) if path.exists() else {}
        return data

    @cached_property
    def model_listing(self) -> dict[str, dict[str, Any]]:
        """``models/listing.json``: per model directory name, its ``config.json`` and index as JSON text."""
        path = self.path / "models" / "listing.json"
        data: dict[str, dict[str, Any]] = _json(path) if path.exists() else {}
        return data

    def listed_model(self, args: list[str]) -> dict[str, Any] | None:
        """The listing's entry of the model a launch command names (by the --model-path directory's name)."""
        return self.model_listing.get(Path(_flag_value(args, "--model-path") or "").name)

    def _log_path(self, key: str) -> Path | None:
        named = self.contract.get("logs", {}).get(key)
        candidates = [self.path / named] if named else [self.path / "logs" / f"{key}.server.log"]
        return next((c for c in candidates if c.exists()), None)

    @cached_property
    def version(self) -> str:
        for path in sorted(self.path.glob("**/server_info.*.json")):
            body = _json(path).get("body")
            if isinstance(body, dict) and body.get("version"):
                return str(body["version"])
        match = re.search(r"sglang-(\d+\.\d+\.\d+)", self.name)
        return match.group(1) if match else ""

    @cached_property
    def gpu(self) -> tuple[str, int]:
        """(name, MiB) of the recording machine's GPU, from env.json's nvidia-smi output."""
        path = self.path / "env.json"
        text = _json(path).get("nvidia_smi", "") if path.exists() else ""
        match = re.search(r"^(NVIDIA [^,]+), (\d+) MiB", str(text), re.MULTILINE)
        return (match.group(1), int(match.group(2))) if match else ("NVIDIA H200", 143771)

    # -- flat layout -----------------------------------------------------------------------------------

    def _staged(self, prefix: str, name: str, suffix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in sorted(self.path.glob(f"{prefix}.{name}*{suffix}")):
            stage = path.name[len(f"{prefix}.{name}") : -len(suffix)].lstrip(".")
            out[stage] = _json(path) if suffix == ".json" else path.read_text()
        return out

    def _flat_scenarios(self) -> list[Scenario]:
        out = []
        logs = self.path / "logs"
        for path in sorted(self.path.glob("http.*.json")):
            name = path.name[len("http.") : -len(".json")]
            keys = [name] + [p.name[: -len(".server.log")] for p in sorted(logs.glob(f"*_{name}.server.log"))]
            key = next((k for k in keys if (logs / f"{k}.server.log").exists()), None)
            if key is None:
                continue
            entry = self.timeline.get(key) or {}
            out.append(
                Scenario(
                    recording=self,
                    name=name,
                    log_path=logs / f"{key}.server.log",
                    exchanges=[Exchange.recorded(item) for item in _json(path)],
                    server_info=self._staged("server_info", name, ".json"),
                    get_server_info=self._staged("get_server_info", name, ".json"),
                    metrics=self._staged("metrics", name, ".txt"),
                    timeline={
                        "health_transitions": _normalize_health(entry.get("health_transitions") or {}),
                        "shutdown": entry.get("shutdown"),
                    },
                )
            )
        return out

    def _flat_failures(self) -> list[Failure]:
        out = []
        for key, entry in self.timeline.items():
            if not isinstance(entry, dict) or "returncode" not in entry:
                continue
            if not (entry.get("exited_by_itself") or "exited by itself" in str(entry.get("exit", ""))):
                continue
            log_path = self._log_path(key)
            if log_path is not None:
                out.append(Failure(self, key, log_path, int(entry["returncode"])))
        return out

    # -- per-scenario layout (tests/hardware/driver.py) -----------------------------------------------------

    def _tag_dirs(self) -> list[Path]:
        return [d for d in sorted(self.path.iterdir()) if d.is_dir() and (d / "server.log").exists()]

    def _pipeline_scenarios(self) -> list[Scenario]:
        out = []
        stages = self.summary.get("stages") or {}
        for tag in self._tag_dirs():
            exchanges, server_info, metrics = [], {}, {}
            for path in sorted(tag.glob("*.json")):
                raw = _json(path)
                if not isinstance(raw, dict) or "status" not in raw or "method" not in raw:
                    continue
                if path.name.startswith("server_info."):
                    server_info[path.name[len("server_info.") : -len(".json")]] = raw
                else:
                    exchanges.append(Exchange.recorded(raw))
            for path in sorted(tag.glob("metrics*.txt")):
                metrics[path.name[len("metrics") : -len(".txt")].lstrip(".")] = path.read_text()
            if not (exchanges or server_info or metrics):
                continue
            health_path = tag / "health.json"
            health = _json(health_path).get("changes", {}) if health_path.exists() else {}
            record = stages.get(tag.name) or {}
            sigterm = record.get("sigterm") if isinstance(record, dict) else None
            out.append(
                Scenario(
                    recording=self,
                    name=tag.name,
                    log_path=tag / "server.log",
                    exchanges=exchanges,
                    server_info=server_info,
                    get_server_info={},
                    metrics=metrics,
                    timeline={"health_transitions": _normalize_health(health), "shutdown": sigterm},
                )
            )
        return out

    def _pipeline_failures(self) -> list[Failure]:
        failures = (self.summary.get("stages") or {}).get("failures") or {}
        out = []
        for tag in self._tag_dirs():
            record = failures.get(tag.name)
            if isinstance(record, dict) and record.get("exited_by_itself") and record.get("returncode") is not None:
                out.append(Failure(self, tag.name, tag / "server.log", int(record["returncode"])))
        return out

    # -- both ----------------------------------------------------------------------------------------------

    def scenarios(self) -> list[Scenario]:
        return self._flat_scenarios() + self._pipeline_scenarios()

    def failures(self) -> list[Failure]:
        # a run cut short for another reason (no error line) says nothing about SGLang
        return [f for f in self._flat_failures() + self._pipeline_failures() if f.error_lines]


def recordings() -> list[Recording]:
    marks = ("README.md", "timeline.json", "summary.json")
    # Only SGLang's own recordings (sglang-<version>-…): smg-<version>/ records the gateway (test_smg_gateway.py).
    return [
        Recording(p)
        for p in sorted(RECORDINGS.iterdir())
        if p.is_dir() and not p.name.startswith("smg-") and any((p / m).exists() for m in marks)
    ]


# -- running the simulator ------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int | str
    headers: dict[str, str]
    body: bytes

    @property
    def media_type(self) -> str | None:
        value = {k.lower(): v for k, v in self.headers.items()}.get("content-type")
        return value.split(";", 1)[0].strip().lower() if value else None

    def json(self) -> Any:
        return json.loads(self.body)

    def lines(self) -> list[str]:
        return self.body.decode(errors="replace").splitlines()


def request(
    port: int, method: str, path: str, body: Any = None, timeout: float = 30, headers: dict[str, str] | None = None
) -> Answer:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Answer(resp.status, dict(resp.headers), resp.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), exc.read())
    except (urllib.error.URLError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        refused = isinstance(reason, ConnectionRefusedError) or isinstance(exc, ConnectionRefusedError)
        return Answer("connection_refused" if refused else f"error: {reason}", {}, b"")


@dataclass
class Workspace:
    """A stand-in host for one recording: GPU file like the recording machine's, a state dir, a model dir."""

    tmp: Path
    recording: Recording
    env: Env = field(init=False)

    def __post_init__(self) -> None:
        name, mib = self.recording.gpu
        gpus = self.tmp / "gpus.json"
        write_gpus(gpus, count=1, memory_mib=mib, name=name)
        self.env = Env(tmp=self.tmp, gpus_file=gpus, state_dir=self.tmp / "state")

    @property
    def version_env(self) -> dict[str, str]:
        """SGLANG_SIM_VERSION of the recording, when the simulator has that release's table."""
        version = self.recording.version
        return {"SGLANG_SIM_VERSION": version} if version in simulator_versions() else {}

    def recorded_model(self, name: str, listing: dict[str, Any]) -> Path:
        """The stand-in of a recorded model: its config.json, tensor names and every other recorded file (tokenizer,
        processor, chat template, when the listing holds their text), sparse shards of WEIGHTS_BYTES."""
        directory = self.tmp / f"recorded-{name}"
        if directory.exists():
            return directory
        directory.mkdir(parents=True)
        for file in listing.get("files", []):
            if file in listing and file != "model.safetensors.index.json":
                (directory / file).write_text(listing[file])
        (directory / "config.json").write_text(listing["config.json"])
        weight_map: dict[str, str] = json.loads(listing["model.safetensors.index.json"])["weight_map"]
        index = {"metadata": {"total_size": WEIGHTS_BYTES}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            with (directory / shard).open("wb") as fh:
                fh.truncate(WEIGHTS_BYTES // len(shards))  # sparse
        return directory

    def model(self, architecture: str, model_type: str) -> Path:
        directory = self.tmp / f"model-{architecture}"
        if directory.exists():
            return directory
        directory.mkdir(parents=True)
        config = {
            "architectures": [architecture],
            "model_type": model_type,
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "vocab_size": 1024,
            "max_position_embeddings": 40960,
            "eos_token_id": 2,
            "torch_dtype": "bfloat16",
        }
        (directory / "config.json").write_text(json.dumps(config))
        weight_map = {
            "model.embed_tokens.weight": "model.safetensors",
            "model.layers.0.mlp.down_proj.weight": "model.safetensors",
            "mtp.layers.0.mlp.down_proj.weight": "model.safetensors",
        }
        index = {"metadata": {"total_size": WEIGHTS_BYTES}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
        with (directory / "model.safetensors").open("wb") as fh:
            fh.truncate(WEIGHTS_BYTES)  # sparse
        return directory

    def argv(
        self, args: list[str], architecture: str, model_type: str, port: int, recorded: dict[str, Any] | None = None
    ) -> list[str]:
        name = Path(_flag_value(args, "--model-path") or "model").name
        model = str(self.recorded_model(name, recorded) if recorded else self.model(architecture, model_type))
        out = list(args)
        for flag in ("--model-path", "--speculative-draft-model-path", "--tokenizer-path"):
            if flag in out or any(a.startswith(flag + "=") for a in out):
                out = _replace_value(out, flag, model)
        out = _replace_value(_replace_value(out, "--host", None), "--port", None)
        return [*out, "--host", "127.0.0.1", "--port", str(port)]

    def launch(self, argv: list[str], **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "sglang_simulator", *argv],
            env=self.env.environ(**{**FAST, **self.version_env, **extra}),  # extra wins
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


@dataclass
class Replay:
    """What the simulator answered to a scenario's requests, in the recording's order."""

    scenario: Scenario
    health: dict[str, list[tuple[int | str, str]]] = field(default_factory=dict)
    answers: list[tuple[Exchange, Answer]] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)
    get_server_info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    returncode: int | None = None
    log: str = ""


def poll_health(port: int, proc: subprocess.Popen[str], timeout: float) -> dict[str, list[tuple[int | str, str]]]:
    """Every change of the answers of /health and /health_generate until both answer 200."""
    seen: dict[str, list[tuple[int | str, str]]] = {"/health": [], "/health_generate": []}
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(done) < 2 and time.monotonic() < deadline and proc.poll() is None:
        for path in seen:
            if path in done:
                continue
            answer = request(port, "GET", path, timeout=5)
            state = (answer.status, answer.body.decode(errors="replace"))
            if not seen[path] or seen[path][-1] != state:
                seen[path].append(state)
            if answer.status == 200:
                done.add(path)
        time.sleep(0.02)
    return seen


def replay(scenario: Scenario, workspace: Workspace, **extra_env: str) -> Replay:
    port = free_port()
    argv = workspace.argv(scenario.args, scenario.architecture, scenario.model_type, port, scenario.recorded_model)
    proc = workspace.launch(argv, **extra_env)
    out = Replay(scenario)
    try:
        out.health = poll_health(port, proc, timeout=30)
        for stage in scenario.server_info:
            if stage == "before":
                out.server_info[stage] = request(port, "GET", "/server_info")
        for stage in scenario.metrics:
            if stage.startswith("before"):
                out.metrics[stage] = request(port, "GET", "/metrics").body.decode()
        for exchange in scenario.exchanges:
            if not exchange.placeholder:
                out.answers.append((exchange, request(port, exchange.method, exchange.path, exchange.body)))
        for stage in scenario.server_info:
            if stage != "before":
                out.server_info[stage] = request(port, "GET", "/server_info")
        for stage in scenario.get_server_info:
            out.get_server_info[stage] = request(port, "GET", "/get_server_info")
        for stage in scenario.metrics:
            if not stage.startswith("before"):
                out.metrics[stage] = request(port, "GET", "/metrics").body.decode()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out.log, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out.log, _ = proc.communicate()
        out.returncode = proc.returncode
    return out


@dataclass
class FailureRun:
    returncode: int | None
    log: str
    answered: list[int | str]


def run_failure(failure: Failure, workspace: Workspace) -> FailureRun:
    port = free_port()
    args = launch_args(failure.log)
    match = re.search(r"Load weight end\..*?type=(\w+)", failure.log)
    argv = workspace.argv(args, match.group(1) if match else "Qwen3ForCausalLM", "qwen3", port, failure.recorded_model)
    proc = workspace.launch(argv)
    answered: list[int | str] = []
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                answered.append("listening")
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    log, _ = proc.communicate(timeout=10)
    return FailureRun(proc.returncode, log, answered)
