"""Drive the project's own code against real SGLang 0.5.17 on a lent GPU, and record everything.

Run by tests/hardware/run.sh on the GPU machine (see tests/hardware/README.md). Stages, each bounded in time,
each catching its own exceptions, each recorded under the result directory, which is packed into
$OUT/results.tar.gz (atomically) after every stage:

  models       tests/hardware/gen_tiny.py: tiny-qwen3 and tiny-mimo-mtp (mimo_mtp_agree)
  nvidia_smi   the driver's answers: --help-query-gpu, the GPU query, -q -x, the table, compute apps, an unknown
               field, /dev/nvidia*, /proc/driver/nvidia/gpus/*/information
  facts        plugins/module_utils/host_facts.py gather() and plugins/module_utils/model_facts.py describe()
  cuda_smoke   roles/sglang_venv/files/cuda_smoke_check.py (or sglang_server's; when present): by UUID --expect 1, --expect 2, and
               CUDA_VISIBLE_DEVICES=3 --expect 1
  tp2          (two GPUs) host_vars/h200x2-tp2.yml, ct129-shaped: the smoke check --expect 2 --all-reduce with the
               instance's environment, then one tensor-parallel-2 NEXTN server over both GPUs, ready, verified, a
               batched greedy probe (BATCH_PROMPTS x BATCH_TOKENS), SIGTERM
  per_gpu      (two GPUs) host_vars/h200x2-per-gpu.yml, b200-shaped: two instances, one per GPU, launched at once, one
               wait() over both, verified at the same time, compute apps mapped to each instance's process tree:
               asserts that no instance's processes hold memory on the other GPU; SIGTERM to both
  plan         tests/hardware/host_vars/h200.yml through plugin_utils/plan_settings.py and sglang_plan() with the real facts
               (on two GPUs kept to GPU 0 with sglang_gpu_ids: [0])
  nextn        the planned instance, planned with an API key (--config <key file>), launched as the unit starts it
               (python3 roles/sglang_server/files/sglang_launcher.py sglang.launch_server + argv, + environment);
               readiness with sglang_readiness.wait(), sglang_rollout.verify() with the key, a timed probe,
               running_requests(), raw recordings, SIGTERM shutdown; checks: no key in the log, 401 without it,
               the process's /proc cmdline
  failures     (concurrently with nextn) the argv with `--no-such-flag 8`, and with --mem-fraction-static 0.00001
  ngram        the same host with sglang_speculative {algorithm: NGRAM, num_draft_tokens: 4}, if time allows
               (ngram and failures: python3 -m sglang.launch_server, no key, as in the earlier recordings)

On a machine with two GPUs (torch.cuda.device_count() >= 2; in a rehearsal, the simulator's GPU list) tp2 and
per_gpu run right after cuda_smoke, before the single-GPU stages; with one GPU they are recorded as skipped.

summary.json holds the headline figures. `--dry-run` runs the pure-Python parts (plan rendering with fake facts,
result packing, the compute-apps mapping) on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = sys.executable
# What serves: real SGLang; a rehearsal without a GPU sets HW_LAUNCH_MODULE=sglang_simulator (see README.md).
LAUNCH_MODULE = os.environ.get("HW_LAUNCH_MODULE", "sglang.launch_server")
# The product's launcher (the unit's ExecStart runs `<venv>/bin/python -I` on it); here run by this python without -I,
# since SGLang comes from PYTHONPATH (the unpacked bundle), not a venv.
LAUNCHER = ROOT / "roles/sglang_server/files/sglang_launcher.py"
# Where the keyed stages' API key files go (the fleet's sglang_server_secrets_dir, under /tmp here).
SECRETS_DIR = Path("/tmp/hw-secrets")
MANDATORY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GPU_QUERY = "index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id"
APPS_QUERY = "pid,gpu_uuid,used_memory,process_name"
PROBE_TOKENS = 256
MIN_ACCEPT = 1.0

Json = dict[str, Any]


class Run:
    """Where results go, the time budget, and the packing of results after every stage."""

    def __init__(self, res: Path, out: Path | None, budget_s: float, t0: float) -> None:
        self.res, self.out, self.t0 = res, out, t0
        self.deadline = t0 + budget_s
        self.summary: Json = {"budget_s": budget_s, "stages": {}, "messages": []}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        # API keys of keyed stages: replaced by '<redacted>' in every file saved (SGLang's /server_info answers the
        # key in plain text, as `api_key` and in `internal_states`, to a client that holds it).
        self.secrets: list[str] = []
        shutil.rmtree(res, ignore_errors=True)
        res.mkdir(parents=True)

    def now(self) -> float:
        return round(time.time() - self.t0, 2)

    def left(self) -> float:
        return self.deadline - time.time()

    def redact(self, text: str) -> str:
        """`text` with every secret of the run replaced by '<redacted>'."""
        for secret in self.secrets:
            text = text.replace(secret, "<redacted>")
        return text

    def log(self, msg: str) -> None:
        line = f"[{self.now():7.1f}s] {self.redact(msg)}"
        print(line, flush=True)
        with self.lock, open(self.res / "driver.log", "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def save(self, name: str, obj: Any) -> Path:
        path = self.res / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = obj if isinstance(obj, str) else json.dumps(obj, indent=2, default=str) + "\n"
        path.write_text(self.redact(text), encoding="utf-8")
        return path

    def message(self, msg: str) -> None:
        self.log(msg)
        with self.lock:
            self.summary["messages"].append(msg)

    def snapshot(self) -> None:
        """summary.json, then the result directory into $OUT/results.tar.gz, atomically."""
        with self.lock:
            self.summary["t_snapshot_s"] = self.now()
            self.save("summary.json", self.summary)
            if self.out is None:
                return
            self.out.mkdir(parents=True, exist_ok=True)
            tmp = self.out / "results.tar.gz.part"
            with tarfile.open(tmp, "w:gz") as tf:
                tf.add(self.res, arcname="results")
            os.replace(tmp, self.out / "results.tar.gz")

    @contextlib.contextmanager
    def stage(self, name: str, needs_s: float = 0.0, skip: str = "") -> Iterator[Json]:
        """Records a stage: start, seconds, its own fields, and the exception if it raised one.

        With `skip` (a reason), or less than `needs_s` seconds left, the body sees record["skipped"] and does nothing.
        """
        record: Json = {"t_start_s": self.now()}
        with self.lock:
            self.summary["stages"][name] = record
        if skip or (needs_s and self.left() < needs_s):
            record["skipped"] = skip or f"{self.left():.0f} s left, the stage needs {needs_s:.0f} s"
            self.log(f"stage {name}: skipped ({record['skipped']})")
            yield record
            self.snapshot()
            return
        self.log(f"stage {name}: start")
        t = time.time()
        try:
            yield record
            record.setdefault("ok", True)
        except Exception as error:
            record["ok"] = False
            record["error"] = f"{type(error).__name__}: {error}"
            record["traceback"] = traceback.format_exc()
            self.log(f"stage {name}: {record['error']}")
        finally:
            record["seconds"] = round(time.time() - t, 2)
            self.log(f"stage {name}: done in {record['seconds']} s")
            self.snapshot()


# ---------------------------------------------------------------------------------------------------------------------
# Recording helpers


def sh(run: Run, name: str, argv: list[str], timeout: float = 60.0, env: dict[str, str] | None = None) -> Json:
    """Runs a command; saves argv, exit code, stdout, stderr and seconds as <name>.json."""
    rec: Json = {"argv": argv, "env_added": {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}}
    t = time.time()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        rec.update(returncode=p.returncode, stdout=p.stdout, stderr=p.stderr)
    except subprocess.TimeoutExpired as error:
        rec.update(returncode=None, timeout=True, stdout=str(error.stdout or ""), stderr=str(error.stderr or ""))
    except OSError as error:
        rec.update(returncode=None, error=repr(error))
    rec["seconds"] = round(time.time() - t, 3)
    run.save(f"{name}.json", rec)
    return rec


def http(
    url: str,
    payload: Any = None,
    timeout: float = 60.0,
    api_key: str = "",
    method: str = "",
    headers: dict[str, str] | None = None,
) -> Json:
    """One exchange, never raising: status ("refused", "timeout" when none), headers, body (JSON or text), seconds.
    `method` defaults to POST with a payload and GET without; `headers` are added as given (recorded as sent)."""
    rec: Json = {"url": url, "method": method or ("POST" if payload is not None else "GET")}
    if payload is not None:
        rec["request"] = payload
    if headers:
        rec["request_headers"] = headers
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=rec["method"])
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    t = time.time()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = int(response.status), dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = int(error.code), dict(error.headers), error.read()
    except (urllib.error.URLError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        rec.update(status="refused" if isinstance(reason, ConnectionRefusedError) else "error", error=repr(reason))
        rec["seconds"] = round(time.time() - t, 4)
        return rec
    except TimeoutError as error:
        rec.update(status="timeout", error=repr(error), seconds=round(time.time() - t, 4))
        return rec
    rec.update(status=status, headers=headers, seconds=round(time.time() - t, 4))
    text = raw.decode(errors="replace")
    try:
        rec["body"] = json.loads(text) if text else ""
    except ValueError:
        rec["body_text"] = text
    return rec


def project_modules() -> dict[str, types.ModuleType]:
    """The product's plugins, imported as Ansible imports them (the checkout is the collection sglang.fleet)."""
    sys.path.insert(0, str(ROOT / "collections"))
    package = "ansible_collections.sglang.fleet.plugins"
    return {
        name: importlib.import_module(f"{package}.{kind}.{name}")
        for kind, name in (
            ("module_utils", "sglang_readiness"),
            ("module_utils", "sglang_router_client"),
            ("module_utils", "host_facts"),
            ("module_utils", "model_facts"),
            ("filter", "sglang_plan"),
            ("modules", "sglang_rollout"),
        )
    }


# ---------------------------------------------------------------------------------------------------------------------
# Plan


def load_yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())


def support_table() -> tuple[Json, str]:
    """roles/sglang_plan/files/sglang-0.5.17.json, or 0.5.23's when that one is absent (then planned as 0.5.23)."""
    for version in ("0.5.17", "0.5.23"):
        path = ROOT / f"roles/sglang_plan/files/sglang-{version}.json"
        if path.exists():
            table: Json = json.loads(path.read_text())
            return table, version
    raise FileNotFoundError("no roles/sglang_plan/files/sglang-0.5.17.json or sglang-0.5.23.json")


def plan_settings(variables_file: Path, **overrides: Any) -> Json:
    """The plan's settings as the action sglang_plan gathers them (plugin_utils/plan_settings.py): role defaults
    overridden by the host_vars."""
    sys.path.insert(0, str(ROOT / "collections"))
    gather = importlib.import_module("ansible_collections.sglang.fleet.plugins.plugin_utils.plan_settings")
    variables: Json = {
        **load_yaml(ROOT / "roles/sglang_plan/defaults/main.yml"),
        **(load_yaml(variables_file) or {}),
        **overrides,
    }

    def variable(name: str, default: Any) -> Any:
        return variables[name] if name in variables or default is gather.MISSING else default

    versions = gather.constraints_versions(str(ROOT / "roles/sglang_venv/files"))
    settings: Json = gather.plan_settings(variable, variables_file.stem, [], versions)
    return settings


def make_plan(
    mods: dict[str, types.ModuleType], facts: Json, run: Run, tag: str, host_vars: str = "h200.yml", **overrides: Any
) -> Json:
    table, version = support_table()
    if version != "0.5.17":
        overrides = {"sglang_version": version, **overrides}
        run.message(f"{tag}: roles/sglang_plan/files/sglang-0.5.17.json is absent; planned against sglang-{version}.json")
    settings = plan_settings(HERE / "host_vars" / host_vars, **overrides)
    result: Json = mods["sglang_plan"].sglang_plan(settings, facts, [table])
    record = {
        "host_vars": f"tests/hardware/host_vars/{host_vars}",
        "support_table": f"sglang-{version}.json",
        "settings": settings,
        **result,
    }
    run.save(f"{tag}/plan.json", record)
    return record


# ---------------------------------------------------------------------------------------------------------------------
# Servers


def without_config(argv: list[str]) -> list[str]:
    """The argv without its `--config FILE` (the API key file the plan names when sglang_api_key is set)."""
    out = list(argv)
    while "--config" in out[:-1]:
        index = out.index("--config")
        del out[index : index + 2]
    return out


class Server:
    """`python3 -m sglang.launch_server` + argv, in its own session, its output time-stamped into a log.

    With `launcher`, as the unit starts it: `python3 roles/sglang_server/files/sglang_launcher.py sglang.launch_server`
    + argv (the unit runs the venv's `python -I`; here SGLang comes from PYTHONPATH, which -I would ignore).
    """

    def __init__(self, run: Run, tag: str, argv: list[str], env_added: dict[str, str], launcher: bool = False) -> None:
        self.run, self.tag = run, tag
        self.cmd = [PY, str(LAUNCHER), LAUNCH_MODULE, *argv] if launcher else [PY, "-m", LAUNCH_MODULE, *argv]
        self.env = {**os.environ, **env_added, **MANDATORY_ENV}
        self.lines: list[tuple[float, str]] = []
        self.logpath = run.res / tag / "server.log"
        self.logpath.parent.mkdir(parents=True, exist_ok=True)
        self.logf = open(self.logpath, "w", encoding="utf-8")  # noqa: SIM115
        # `# cmd:` is what tests/contract/recordings.py replays against the simulator: `python3 -m MODULE` + the argv
        # without `--config <key file>` (the key stays out of the recordings, so a replay sends none). When the launch
        # differs (the product's launcher, a key file), `# launched:` above it is the exact command.
        replay = [PY, "-m", LAUNCH_MODULE, *without_config(argv)]
        launched = f"# launched: {' '.join(self.cmd)}\n" if self.cmd != replay else ""
        # A key given on the command line (--api-key) is written as '<redacted>', like every line below.
        self.logf.write(run.redact(f"{launched}# cmd: {' '.join(replay)}\n# env added: {json.dumps(env_added)}\n"))
        self.t_launch = time.time()
        self.p = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        run.procs.append(self.p)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        run.log(f"{tag}: launched pid {self.p.pid}: {' '.join(self.cmd)}")

    def _read(self) -> None:
        assert self.p.stdout is not None
        for raw in self.p.stdout:
            rel = time.time() - self.t_launch
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append((rel, line))
            self.logf.write(f"[+{rel:8.3f}s] {self.run.redact(line)}\n")
            self.logf.flush()

    def rel(self) -> float:
        return round(time.time() - self.t_launch, 3)

    def cmdline(self) -> list[str] | None:
        """The argv the launched process runs, from /proc/<pid>/cmdline (None once it is gone)."""
        try:
            raw = Path(f"/proc/{self.p.pid}/cmdline").read_bytes()
        except OSError:
            return None
        return [word.decode(errors="replace") for word in raw.split(b"\0")[:-1]]

    def first(self, pattern: str) -> float | None:
        rx = re.compile(pattern)
        return next((round(t, 3) for t, line in list(self.lines) if rx.search(line)), None)

    def tail(self, n: int = 40) -> list[str]:
        return [line for _, line in self.lines[-n:]]

    def state(self, unit: str) -> dict[str, str]:
        """What systemctl show would say of a unit running this process (for sglang_readiness.wait)."""
        rc = self.p.poll()
        if rc is None:
            return {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "InvocationID": "x"}
        return {
            "ActiveState": "failed",
            "SubState": "failed",
            "Result": "exit-code",
            "ExecMainStatus": str(rc),
            "NRestarts": "0",
            "InvocationID": "x",
        }

    def wait_exit(self, seconds: float) -> int | None:
        try:
            return self.p.wait(max(0.1, seconds))
        except subprocess.TimeoutExpired:
            return None

    def sigterm(self, grace: float = 40.0) -> Json:
        """SIGTERM to the main process (as systemd's stop); seconds until it exits; then the session is killed."""
        rec: Json = {"t_sent_s": self.rel()}
        t = time.time()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            rc = self.wait_exit(grace)
            rec["exited_after_s"] = round(time.time() - t, 3) if rc is not None else None
            if rc is None:
                rec["escalated_to_sigkill"] = True
        else:
            rec["already_exited"] = True
        rec["returncode"] = self.kill()
        time.sleep(0.5)
        rec["session_left_over"] = self.session_alive()
        return rec

    def session_alive(self) -> bool:
        try:
            os.killpg(self.p.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill(self) -> int | None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)
        rc = self.wait_exit(10)
        self.reader.join(3)
        self.logf.flush()
        return rc


class HealthRecorder(threading.Thread):
    """Polls /health and /health_generate from launch; records every change of answer (status and body)."""

    def __init__(self, server: Server, url: str, until: float) -> None:
        super().__init__(daemon=True)
        self.server, self.url, self.until = server, url, until
        self.changes: dict[str, list[Json]] = {"/health": [], "/health_generate": []}
        self.first_200: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        last: dict[str, Any] = {}
        while not self.stop.is_set() and time.time() < self.until and self.server.p.poll() is None:
            for path in self.changes:
                if path in self.first_200 and len(self.first_200) == 2:
                    continue
                rec = http(self.url + path, timeout=30)
                answer = (rec["status"], rec.get("body", rec.get("body_text", "")))
                if last.get(path) != answer:
                    self.changes[path].append(
                        {"t_s": self.server.rel(), "status": rec["status"], "body": answer[1], "seconds": rec["seconds"]}
                    )
                    last[path] = answer
                if rec["status"] == 200 and path not in self.first_200:
                    self.first_200[path] = self.server.rel()
            if len(self.first_200) == 2:
                return
            time.sleep(0.5)

    def record(self) -> Json:
        return {"changes": self.changes, "first_200_s": self.first_200}


TIMELINE = {
    "first_output_line": r".",
    "server_args_logged": r"server_args=ServerArgs",
    "load_weight_begin": r"Load weight begin",
    "load_weight_end": r"Load weight end",
    "kv_cache_allocated": r"KV Cache is allocated|max_total_num_tokens",
    "uvicorn_running": r"Uvicorn running|Application startup complete",
    "fired_up": r"The server is fired up",
    "jit_build": r"(?i)(jit|ninja|nvcc).*(compil|build)",
}


def instance_argv_with(argv: list[str], **flags: str) -> list[str]:
    """The argv with flags (given as --flag-name) replaced, or appended when absent."""
    out = list(argv)
    for flag, value in flags.items():
        name = "--" + flag.replace("_", "-")
        if name in out:
            out[out.index(name) + 1] = value
        else:
            out += [name, value]
    return out


def launch(
    run: Run, tag: str, instance: Json, record: Json, ready_timeout: float, launcher: bool = False
) -> tuple[Server, HealthRecorder]:
    """The planned instance's argv and environment, launched; its /health answers recorded from launch."""
    record["argv"] = instance["argv"]
    record["environment"] = instance["environment"]
    server = Server(run, tag, instance["argv"], instance["environment"], launcher=launcher)
    record["cmd"] = server.cmd
    record["mandatory_env"] = {name: server.env.get(name) for name in MANDATORY_ENV}
    health = HealthRecorder(server, instance["url"].rstrip("/"), time.time() + ready_timeout)
    health.start()
    return server, health


def record_ready(run: Run, tag: str, server: Server, health: HealthRecorder, ready: bool, record: Json) -> bool:
    """This instance's health changes and start timeline once wait() returned; returns `ready`."""
    record["ready_after_launch_s"] = server.rel() if ready else None
    health.join(timeout=5)
    health.stop.set()
    record["health"] = health.record()
    record["timeline_s"] = {key: server.first(rx) for key, rx in TIMELINE.items()}
    run.save(f"{tag}/health.json", health.record())
    if not ready:
        record["returncode"] = server.p.poll()
        record["output_tail"] = server.tail(60)
    return ready


def exercise(run: Run, mods: dict[str, types.ModuleType], tag: str, instance: Json, record: Json, api_key: str = "") -> None:
    """A ready instance: verify(), a timed probe, running_requests(), and the raw exchanges recorded (with the key)."""
    readiness = mods["sglang_readiness"]
    rollout = mods["sglang_rollout"]
    url = instance["url"].rstrip("/")
    exchange = functools.partial(http, timeout=120, api_key=api_key)
    run.save(f"{tag}/server_info.before.json", exchange(f"{url}/server_info"))
    apps = sh(
        run,
        f"{tag}/nvidia-smi.compute-apps.serving",
        ["nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"],
    )
    record["compute_apps_while_serving"] = apps.get("stdout")
    host = rollout.Host(get_json=functools.partial(readiness.http_json, api_key=api_key))
    t = time.time()
    record["verify_started_s"] = run.now()
    try:
        record["verify"] = rollout.verify(host, instance, PROBE_TOKENS, MIN_ACCEPT)
    except Exception as error:
        record["verify_error"] = f"{type(error).__name__}: {error}"
    record["verify_seconds"] = round(time.time() - t, 2)
    record["verify_ended_s"] = run.now()
    run.log(f"{tag}: verify() -> {record.get('verify', record.get('verify_error'))}")
    probe = {
        "text": "sglang-fleet rollout probe:",
        "sampling_params": {"max_new_tokens": PROBE_TOKENS, "temperature": 0, "ignore_eos": True},
    }
    t = time.time()
    answer = readiness.http_json(f"{url}/generate", probe, timeout=120, api_key=api_key)
    seconds = time.time() - t
    tokens = int(((answer or {}).get("meta_info") or {}).get("completion_tokens") or 0)
    record["probe"] = {
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_s": round(tokens / seconds, 1),
        "meta_info": (answer or {}).get("meta_info"),
    }
    record["running_requests"] = rollout.running_requests(url)
    run.save(f"{tag}/generate.greedy256.json", exchange(f"{url}/generate", probe))
    run.save(f"{tag}/server_info.after.json", exchange(f"{url}/server_info"))
    metrics = exchange(f"{url}/metrics")
    run.save(f"{tag}/metrics.txt", str(metrics.get("body_text", metrics.get("body", ""))))
    run.save(f"{tag}/v1_models.json", exchange(f"{url}/v1/models"))
    chat = {"model": "no-such-model", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0}
    run.save(f"{tag}/chat.unknown_model.json", exchange(f"{url}/v1/chat/completions", chat))


def serve_and_verify(
    run: Run,
    mods: dict[str, types.ModuleType],
    tag: str,
    instance: Json,
    record: Json,
    ready_timeout: float,
    extra: Callable[[], None] | None = None,
    api_key: str = "",
    launcher: bool = False,
    on_launch: Callable[[Server], None] | None = None,
) -> None:
    """Launch the planned instance, wait() for it, verify() it, record the raw exchanges, then SIGTERM it.

    `extra`, when given, runs after the recordings while the server still serves; `on_launch` gets the Server at once.
    `api_key` goes with every request but the health routes; `launcher` starts it as the unit does (Server).
    """
    readiness = mods["sglang_readiness"]
    server, health = launch(run, tag, instance, record, ready_timeout, launcher=launcher)
    if on_launch is not None:
        on_launch(server)
    try:
        services = [{"unit": instance["unit"], "url": instance["url"].rstrip("/")}]
        t = time.time()
        result = readiness.wait(services, "/health_generate", ready_timeout, 1.0, state=server.state)
        record["wait"] = result
        record["wait_seconds"] = round(time.time() - t, 2)
        run.log(f"{tag}: wait() -> {result}")
        if not record_ready(run, tag, server, health, "failed" not in result, record):
            return
        run.snapshot()
        exercise(run, mods, tag, instance, record, api_key=api_key)
        if extra is not None:
            extra()
        run.snapshot()
    finally:
        health.stop.set()
        record["sigterm"] = server.sigterm()
        record.setdefault("output_tail", server.tail(15))
        run.log(f"{tag}: shutdown {record['sigterm']}")


def failure_run(run: Run, tag: str, argv: list[str], env: dict[str, str], max_s: float, record: Json) -> None:
    """A launch that must fail: exit code, seconds, the last output lines, the error line."""
    server = Server(run, tag, argv, env)
    rc = server.wait_exit(max_s)
    record["exited_by_itself"] = rc is not None
    record["seconds_to_exit"] = server.rel() if rc is not None else None
    record["returncode"] = rc if rc is not None else server.kill()
    if rc is not None:
        server.kill()  # children of the session, if any are left
    record["output_tail"] = server.tail(30)
    errors = [line for _, line in server.lines if re.search(r"error:|Error:", line)]
    record["error_lines"] = errors[-5:]
    run.log(f"{tag}: rc={record['returncode']} after {record['seconds_to_exit']} s: {errors[-1:] or '(no error line)'}")


# ---------------------------------------------------------------------------------------------------------------------
# Stages


def stage_models(run: Run, models: Path, record: Json) -> None:
    """Both tiny models, written by one gen_tiny.py process."""
    pairs = (("qwen3", "tiny-qwen3"), ("mimo_mtp_agree", "tiny-mimo-mtp"))
    argv = [PY, str(HERE / "gen_tiny.py")] + [word for arch, name in pairs for word in (arch, str(models / name))]
    rec = sh(run, "models/gen_tiny", argv, timeout=180)
    record["returncode"] = rec["returncode"]
    if rec["returncode"] != 0:
        raise RuntimeError(f"gen_tiny.py failed: {(rec.get('stderr') or '')[-800:]}")


VERSIONS = """
import importlib.metadata as m, sys
print("python", sys.version.split()[0])
for name in ("torch", "triton", "transformers", "tokenizers", "sglang", "sglang-kernel", "flashinfer-python",
             "xgrammar", "apache-tvm-ffi", "fastapi", "uvicorn", "pydantic", "openai", "numpy", "safetensors", "PyYAML",
             "Jinja2"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "absent")
import torch
print("torch.cuda", torch.version.cuda, "devices", torch.cuda.device_count())
"""


def stage_env(run: Run, record: Json) -> None:
    rec = sh(run, "env/versions", [PY, "-c", VERSIONS], timeout=120)
    record["versions"] = (rec.get("stdout") or "").splitlines()
    sh(run, "env/nvcc", ["sh", "-c", "nvcc --version; which nvcc g++ ninja; g++ --version | head -1"], timeout=30)
    sh(run, "env/os", ["sh", "-c", "uname -r; head -2 /etc/os-release; nproc; free -g; df -h /tmp"], timeout=30)


def stage_nvidia_smi(run: Run, record: Json) -> None:
    calls = {
        "help-query-gpu": ["nvidia-smi", "--help-query-gpu"],
        "query-gpu": ["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
        "q-x": ["nvidia-smi", "-q", "-x"],
        "table": ["nvidia-smi"],
        "compute-apps.idle": ["nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"],
        "unknown-field.minor_number": ["nvidia-smi", "--query-gpu=index,minor_number", "--format=csv,noheader,nounits"],
        "ls-dev-nvidia": ["sh", "-c", "ls -l /dev/nvidia* /dev/nvidia-caps 2>&1"],
    }
    for name, argv in calls.items():
        record[name] = sh(run, f"nvidia_smi/{name}", argv, timeout=60).get("returncode")
    info = {str(p): p.read_text(errors="replace") for p in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information"))}
    run.save("nvidia_smi/proc-information.json", info)
    record["proc_information_files"] = len(info)


def stage_facts(run: Run, mods: dict[str, types.ModuleType], model_dir: Path, record: Json) -> Json:
    facts: Json = mods["host_facts"].gather("nvidia-smi")
    run.save("facts/host_facts.json", facts)
    model: Json = mods["model_facts"].describe(str(model_dir), {})
    run.save("facts/model_facts.json", model)
    record["gpus"] = [
        {k: g.get(k) for k in ("index", "uuid", "name", "memory_total_mib", "minor_number")} for g in facts.get("gpus") or []
    ]
    record["gpu_error"] = facts.get("gpu_error")
    record["model"] = {k: model.get(k) for k in ("architectures", "mtp_layers", "has_mtp_tensors", "shards", "total_size")}
    return {**facts, "model": model}


def smoke_command() -> tuple[list[str], str] | None:
    """The product's CUDA smoke check (and what it is); in a rehearsal, the simulator's answer to it."""
    if LAUNCH_MODULE == "sglang_simulator":
        return [PY, "-m", "sglang_simulator.cuda_check"], "sglang_simulator.cuda_check (rehearsal)"
    candidates = [ROOT / f"roles/{role}/files/cuda_smoke_check.py" for role in ("sglang_venv", "sglang_server")]
    script = next((path for path in candidates if path.exists()), None)
    return ([PY, str(script)], str(script.relative_to(ROOT))) if script is not None else None


def stage_cuda_smoke(run: Run, uuids: list[str], record: Json) -> None:
    smoke = smoke_command()
    if smoke is None:
        record["skipped"] = "no roles/*/files/cuda_smoke_check.py"
        return
    command, record["script"] = smoke
    uuid = uuids[0] if uuids else "GPU-unknown"
    cases = {"uuid.expect1": (uuid, "1", 0), "uuid.expect2": (uuid, "2", 1), "index3.expect1": ("3", "1", 1)}
    if len(uuids) >= 2:  # the second GPU alone, as a per-GPU instance sees it
        cases["uuid1.expect1"] = (uuids[1], "1", 0)
    for name, (visible, expect, want_rc) in cases.items():
        rec = sh(run, f"cuda_smoke/{name}", [*command, "--expect", expect], timeout=120, env={"CUDA_VISIBLE_DEVICES": visible})
        record[name] = {
            "returncode": rec.get("returncode"),
            "expected_returncode": want_rc,
            "stdout": (rec.get("stdout") or "").strip()[-800:],
        }


# ---------------------------------------------------------------------------------------------------------------------
# Two GPUs: a ct129-shaped instance (tensor parallel 2) and a b200-shaped host (one instance per GPU)

BATCH_PROMPTS = 8
BATCH_TOKENS = 512


def gpu_count(run: Run, facts: Json) -> Json:
    """How many GPUs CUDA sees: torch.cuda.device_count() from the env stage; in a rehearsal (no GPU, the simulator
    serving), the simulator's GPU list as nvidia-smi reports it."""
    listed = len(facts.get("gpus") or [])
    torch_count: int | None = None
    for line in (run.summary["stages"].get("env") or {}).get("versions") or []:
        match = re.fullmatch(r"torch\.cuda \S+ devices (\d+)", str(line).strip())
        if match:
            torch_count = int(match.group(1))
    rehearsal = LAUNCH_MODULE != "sglang.launch_server"
    count = listed if rehearsal else (torch_count or 0)
    source = "nvidia-smi (rehearsal: the simulator's GPU list)" if rehearsal else "torch.cuda.device_count()"
    return {"count": count, "source": source, "torch": torch_count, "nvidia_smi": listed}


def flag_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def batch_probe(run: Run, tag: str, url: str, record: Json) -> None:
    """One all-reduce-heavy generation: BATCH_PROMPTS prompts at once, BATCH_TOKENS greedy tokens each."""
    payload = {
        "text": [f"sglang-fleet all-reduce probe {i}:" + " tensor parallel" * i for i in range(BATCH_PROMPTS)],
        "sampling_params": {"max_new_tokens": BATCH_TOKENS, "temperature": 0, "ignore_eos": True},
    }
    rec = http(f"{url}/generate", payload, timeout=240)
    run.save(f"{tag}/generate.batch{BATCH_PROMPTS}x{BATCH_TOKENS}.json", rec)
    body = rec.get("body")
    answers = [a for a in body if isinstance(a, dict)] if isinstance(body, list) else []
    metas = [a.get("meta_info") or {} for a in answers]
    each = [int(m.get("completion_tokens") or 0) for m in metas]
    seconds = float(rec.get("seconds") or 0)
    record["batch_probe"] = {
        "status": rec["status"],
        "prompts": BATCH_PROMPTS,
        "max_new_tokens": BATCH_TOKENS,
        "completion_tokens": each,
        "tokens_total": sum(each),
        "seconds": seconds,
        "tokens_per_s": round(sum(each) / seconds, 1) if seconds else None,
        "spec_accept_length": [m.get("spec_accept_length") for m in metas],
        "ok": rec["status"] == 200 and each == [BATCH_TOKENS] * BATCH_PROMPTS,
    }
    run.log(f"{tag}: batch probe {record['batch_probe']['tokens_total']} tokens in {seconds:.2f} s")


def smoke_all_reduce(run: Run, tag: str, instance: Json, record: Json) -> None:
    """The product's CUDA smoke check with the instance's environment: --expect 2 --all-reduce (one process per GPU)."""
    smoke = smoke_command()
    if smoke is None:
        record["cuda_smoke_all_reduce"] = {"skipped": "no roles/*/files/cuda_smoke_check.py"}
        return
    command, script = smoke
    rec = sh(
        run,
        f"{tag}/cuda_smoke.expect2.all_reduce",
        [*command, "--expect", "2", "--all-reduce"],
        timeout=180,
        env=instance["environment"],
    )
    stdout = (rec.get("stdout") or "").strip()
    answer: Any = None
    with contextlib.suppress(ValueError, IndexError):
        answer = json.loads(stdout.splitlines()[-1])
    record["cuda_smoke_all_reduce"] = {
        "script": script,
        "returncode": rec.get("returncode"),
        "seconds": rec.get("seconds"),
        "result": answer if answer is not None else stdout[-800:],
        "ok": rec.get("returncode") == 0 and isinstance(answer, dict) and answer.get("all_reduce") is True,
    }
    run.log(f"{tag}: CUDA smoke check --expect 2 --all-reduce -> {record['cuda_smoke_all_reduce']['result']}")


def stage_tp2(run: Run, mods: dict[str, types.ModuleType], facts: Json, record: Json) -> None:
    """tests/hardware/host_vars/h200x2-tp2.yml planned, smoke-checked, launched, verified, probed, stopped."""
    plan = make_plan(mods, facts, run, "tp2", host_vars="h200x2-tp2.yml")
    record["problems"] = plan["problems"]
    record["instances"] = len(plan["instances"])
    if not plan["instances"]:
        raise RuntimeError("the TP2 plan derived no instance")
    instance = plan["instances"][0]
    uuids = [str(gpu["uuid"]) for gpu in (facts.get("gpus") or [])[:2]]
    record["plan_checks"] = {
        "one_instance": len(plan["instances"]) == 1,
        "cuda_visible_devices_both_uuids": instance["environment"].get("CUDA_VISIBLE_DEVICES") == ",".join(uuids),
        "tp_size_2": flag_value(instance["argv"], "--tp-size") == "2",
        "speculative_nextn": flag_value(instance["argv"], "--speculative-algorithm") == "NEXTN",
    }
    smoke_all_reduce(run, "tp2", instance, record)
    url = instance["url"].rstrip("/")

    def while_serving() -> None:
        info = http(f"{url}/server_info", timeout=60).get("body")
        record["server_info_tp_size"] = info.get("tp_size") if isinstance(info, dict) else None
        batch_probe(run, "tp2", url, record)

    serve_and_verify(
        run,
        mods,
        "tp2",
        instance,
        record,
        ready_timeout=min(200.0, max(90.0, run.left() - 200)),
        extra=while_serving,
        launcher=True,
    )
    record["checks"] = {
        **record["plan_checks"],
        "cuda_smoke_all_reduce": record["cuda_smoke_all_reduce"].get("ok"),
        "ready": record.get("ready_after_launch_s") is not None,
        "verified": "verify" in record,
        "server_info_tp_size_2": record.get("server_info_tp_size") == 2,
        "batch_probe": (record.get("batch_probe") or {}).get("ok"),
        "mandatory_env": record.get("mandatory_env") == MANDATORY_ENV,
    }


def write_key_file(instance: Json, key: str) -> Path:
    """The instance's --config file as roles/sglang_server/templates/sglang.secret.yaml.j2 renders it, mode 0600."""
    path = Path(str(instance["config_file"]))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(
            f"# Options of {instance['name']} that must not be in its command line (SGLang's --config).\n"
            f"api-key: {json.dumps(key)}\n"
        )
    os.chmod(path, 0o600)
    return path


def stage_nextn(
    run: Run, mods: dict[str, types.ModuleType], facts: Json, keyless: Json, record: Json, ready_timeout: float, **overrides: Any
) -> None:
    """The NEXTN instance as the unit now starts it: planned with an API key (--config <secrets_dir>/<name>.yaml),
    the key file written as the fleet writes it, launched through the product's launcher; then readiness (health
    routes need no key), verify() and every recorded request with the key, and the checks (a) the key is nowhere in
    the server's log, (b) no key: 401, /health_generate: 200, (c) /proc/<pid>/cmdline = launcher + module + argv."""
    key = "sk-hw-" + secrets.token_hex(16)
    run.secrets.append(key)
    plan = make_plan(mods, facts, run, "nextn", sglang_api_key=key, sglang_server_secrets_dir=str(SECRETS_DIR), **overrides)
    record["problems"] = plan["problems"]
    if not plan["instances"]:
        raise RuntimeError("the keyed NEXTN plan derived no instance")
    instance = plan["instances"][0]
    config_file = f"{SECRETS_DIR}/{instance['name']}.yaml"
    record["plan_checks"] = {
        "has_api_key": plan["settings"].get("has_api_key") is True,
        "secrets_dir": plan["settings"].get("secrets_dir") == str(SECRETS_DIR),
        "argv_ends_with_config": instance["argv"][-2:] == ["--config", config_file],
        "argv_is_keyless_plan_plus_config": instance["argv"] == [*keyless["argv"], "--config", config_file],
        "plan_holds_no_key": key not in json.dumps(plan),
    }
    path = write_key_file(instance, key)
    record["key_file"] = {"path": str(path), "mode": oct(path.stat().st_mode & 0o777)}
    url = instance["url"].rstrip("/")
    servers: list[Server] = []

    def while_serving() -> None:
        record["proc_cmdline"] = servers[0].cmdline()
        info = http(f"{url}/server_info", timeout=60, api_key=key).get("body")
        record["server_info_answers_key"] = isinstance(info, dict) and info.get("api_key") == key
        no_key = http(f"{url}/v1/models", timeout=60)
        health = http(f"{url}/health_generate", timeout=120)
        with_key = http(f"{url}/v1/models", timeout=60, api_key=key)
        record["auth"] = {
            "v1_models_without_key": no_key["status"],
            "v1_models_body_without_key": no_key.get("body", no_key.get("body_text")),
            "health_generate_without_key": health["status"],
            "v1_models_with_key": with_key["status"],
        }

    try:
        serve_and_verify(
            run,
            mods,
            "nextn",
            instance,
            record,
            ready_timeout,
            extra=while_serving,
            api_key=key,
            launcher=True,
            on_launch=servers.append,
        )
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    log = servers[0].logpath.read_text(errors="replace") if servers else ""
    args_lines = [line for line in log.splitlines() if "server_args=" in line]
    record["server_args_line"] = args_lines[0] if args_lines else None
    expected = [PY, str(LAUNCHER), LAUNCH_MODULE, *instance["argv"]]
    cmdline = record.get("proc_cmdline")
    record["files_holding_key"] = key_in_results(run, key)
    auth = record.get("auth") or {}
    record["checks"] = {
        **record["plan_checks"],
        "key_file_mode_0600": record["key_file"]["mode"] == "0o600",
        "ready": record.get("ready_after_launch_s") is not None,
        "verified": "verify" in record,
        "key_not_in_log": bool(log) and key not in log,
        "server_args_line_redacted": bool(args_lines) and "<redacted>" in args_lines[0] and key not in args_lines[0],
        "without_key_401": auth.get("v1_models_without_key") == 401,
        "health_generate_without_key_200": auth.get("health_generate_without_key") == 200,
        "with_key_200": auth.get("v1_models_with_key") == 200,
        "cmdline_is_launcher_module_argv": cmdline == expected,
        "cmdline_holds_no_key": cmdline is not None and key not in "\0".join(cmdline),
        "summary_holds_no_key": key not in json.dumps(record, default=str),
        "results_hold_no_key": not record["files_holding_key"],
        "mandatory_env": record.get("mandatory_env") == MANDATORY_ENV,
    }
    failed = [name for name, ok in record["checks"].items() if not ok]
    if failed:
        record["ok"] = False
        record["failed_checks"] = failed
    run.log(f"nextn: checks {'all pass' if not failed else 'FAILED: ' + ', '.join(failed)}")


def key_in_results(run: Run, key: str) -> list[str]:
    """The files under the results folder that hold the key (none expected: Run.save redacts it)."""
    found = []
    for path in sorted(run.res.rglob("*")):
        with contextlib.suppress(OSError):
            if path.is_file() and key.encode() in path.read_bytes():
                found.append(str(path.relative_to(run.res)))
    return found


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, name) of every process, from /proc/<pid>/stat."""
    table: dict[int, tuple[int, int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        table[int(stat.parent.name)] = (int(fields[1]), int(fields[3]), text[text.index("(") + 1 : text.rindex(")")])
    return table


def process_tree(root: int, table: dict[int, tuple[int, int, str]]) -> list[int]:
    """`root` and its descendants (by parent PID: SGLang's scheduler and detokenizer are children of the launched
    process) and any other process of its session (each server is launched in a session of its own)."""
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, sid, _) in table.items():
            if pid not in tree and (ppid in tree or sid == root):
                tree.add(pid)
                grew = True
    return sorted(tree)


def gpu_placement(apps_csv: str, roots: dict[str, tuple[int, list[str]]]) -> Json:
    """Maps every `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name` row to the instance whose
    process tree holds its PID; `ok` when no instance's process holds memory on a GPU other than its own and every
    instance holds memory on its own GPU (else `problems` says which)."""
    table = process_table()
    owner: dict[int, str] = {}
    trees: dict[str, list[int]] = {}
    for tag, (root, _) in roots.items():
        trees[tag] = process_tree(root, table)
        owner.update({pid: tag for pid in trees[tag]})
    rows: list[Json] = []
    for line in apps_csv.splitlines():
        parts = [part.strip() for part in line.split(",", 3)]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        rows.append(
            {
                "pid": pid,
                "gpu_uuid": parts[1],
                "used_mib": int(parts[2]) if parts[2].isdigit() else None,
                "process_name": parts[3] if len(parts) > 3 else "",
                "instance": owner.get(pid),
                "proc_name": table[pid][2] if pid in table else None,
            }
        )
    problems: list[str] = []
    instances: Json = {}
    for tag, (root, own) in roots.items():
        mine = [row for row in rows if row["instance"] == tag]
        by_pid: dict[str, dict[str, int]] = {}
        for row in mine:
            gpus = by_pid.setdefault(str(row["pid"]), {})
            gpus[row["gpu_uuid"]] = gpus.get(row["gpu_uuid"], 0) + (row["used_mib"] or 0)
        own_mib = sum(row["used_mib"] or 0 for row in mine if row["gpu_uuid"] in own)
        elsewhere = [row for row in mine if row["gpu_uuid"] not in own]
        instances[tag] = {
            "root_pid": root,
            "gpu_uuids": own,
            "processes": {str(pid): table[pid][2] if pid in table else None for pid in trees[tag]},
            "gpu_memory_mib_by_pid": by_pid,
            "own_gpu_mib": own_mib,
            "other_gpu_mib": sum(row["used_mib"] or 0 for row in elsewhere),
        }
        for row in elsewhere:
            problems.append(
                f"{tag}: PID {row['pid']} ({row['process_name']}) holds {row['used_mib']} MiB on "
                f"{row['gpu_uuid']}, not its GPU {','.join(own)}"
            )
        if own_mib <= 0:
            problems.append(f"{tag}: no process of its tree (PIDs {trees[tag]}) holds memory on its GPU {','.join(own)}")
    return {
        "rows": rows,
        "instances": instances,
        "unmapped": [row for row in rows if row["instance"] is None],
        "problems": problems,
        "ok": not problems,
    }


def stage_per_gpu(run: Run, mods: dict[str, types.ModuleType], facts: Json, record: Json) -> None:
    """tests/hardware/host_vars/h200x2-per-gpu.yml: both instances launched at once, ready (one wait() over both) and
    verified at the same time, the GPU memory of each one's processes mapped, then both stopped."""
    readiness = mods["sglang_readiness"]
    plan = make_plan(mods, facts, run, "per_gpu", host_vars="h200x2-per-gpu.yml")
    record["problems"] = plan["problems"]
    instances: list[Json] = plan["instances"]
    record["instances"] = len(instances)
    if len(instances) != 2:
        raise RuntimeError(f"the per-GPU plan derived {len(instances)} instance(s), expected 2")
    uuids = [str(gpu["uuid"]) for gpu in (facts.get("gpus") or [])[:2]]
    record["plan_checks"] = {
        "distinct_ports": len({i["port"] for i in instances}) == 2,
        "distinct_nccl_ports": len({i["nccl_port"] for i in instances}) == 2,
        "one_uuid_each": [i["environment"].get("CUDA_VISIBLE_DEVICES") for i in instances] == uuids,
        "tp_size_1": all(flag_value(i["argv"], "--tp-size") == "1" for i in instances),
    }
    tags = [f"per_gpu.{i['port']}" for i in instances]
    record["instance_stages"] = tags
    records: dict[str, Json] = {}
    with run.lock:
        for tag in tags:
            records[tag] = run.summary["stages"][tag] = {"t_start_s": run.now()}
    ready_timeout = min(180.0, run.left() - 60)
    launched: dict[str, tuple[Server, HealthRecorder]] = {}
    placement: Json = {}
    try:
        for tag, instance in zip(tags, instances, strict=True):
            launched[tag] = launch(run, tag, instance, records[tag], ready_timeout, launcher=True)
        states = {instance["unit"]: launched[tag][0].state for tag, instance in zip(tags, instances, strict=True)}
        services = [{"unit": i["unit"], "url": i["url"].rstrip("/")} for i in instances]
        t = time.time()
        result = readiness.wait(services, "/health_generate", ready_timeout, 1.0, state=lambda unit: states[unit](unit))
        record["wait"] = result
        record["wait_seconds"] = round(time.time() - t, 2)
        run.log(f"per_gpu: wait() over both -> {result}")
        for tag, instance in zip(tags, instances, strict=True):
            records[tag]["wait"] = result
            server, health = launched[tag]
            record_ready(run, tag, server, health, instance["unit"] in (result.get("ready") or {}), records[tag])
        if "failed" in result:
            return
        record["both_ready_s"] = run.now()
        run.snapshot()

        def exercise_one(tag: str, instance: Json) -> None:
            try:
                exercise(run, mods, tag, instance, records[tag])
            except Exception as error:
                records[tag]["error"] = f"{type(error).__name__}: {error}"
                records[tag]["traceback"] = traceback.format_exc()

        threads = [
            threading.Thread(target=exercise_one, args=(tag, instance), daemon=True)
            for tag, instance in zip(tags, instances, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(1.0, min(240.0, run.left() - 30)))
        windows = [(records[tag].get("verify_started_s"), records[tag].get("verify_ended_s")) for tag in tags]
        record["verify_windows_s"] = dict(zip(tags, windows, strict=True))
        starts = [w[0] for w in windows if w[0] is not None]
        ends = [w[1] for w in windows if w[1] is not None]
        record["verified_concurrently"] = len(starts) == len(ends) == 2 and max(starts) < min(ends)
        record["both_verified"] = all("verify" in records[tag] for tag in tags)
        apps = sh(
            run,
            "per_gpu/nvidia-smi.compute-apps.both-serving",
            ["nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits"],
        )
        roots = {
            tag: (launched[tag][0].p.pid, list(instance["gpu_uuids"])) for tag, instance in zip(tags, instances, strict=True)
        }
        placement = gpu_placement(apps.get("stdout") or "", roots)
        sh(
            run,
            "per_gpu/nvidia-smi.query-gpu.both-serving",
            ["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
        )
        run.save("per_gpu/placement.json", placement)
        record["gpu_memory_by_instance"] = {
            tag: {
                "gpu_uuids": entry["gpu_uuids"],
                "own_gpu_mib": entry["own_gpu_mib"],
                "other_gpu_mib": entry["other_gpu_mib"],
                "gpu_memory_mib_by_pid": entry["gpu_memory_mib_by_pid"],
            }
            for tag, entry in placement["instances"].items()
        }
        record["unmapped_compute_apps"] = placement["unmapped"]
        record["placement_problems"] = placement["problems"]
        record["memory_only_on_own_gpu"] = "pass" if placement["ok"] else "fail"
        run.log(f"per_gpu: memory only on own GPU: {record['memory_only_on_own_gpu']} {placement['problems']}")
    finally:

        def stop(tag: str) -> None:
            server, health = launched[tag]
            health.stop.set()
            records[tag]["sigterm"] = server.sigterm()
            records[tag].setdefault("output_tail", server.tail(15))
            run.log(f"{tag}: shutdown {records[tag]['sigterm']}")

        stoppers = [threading.Thread(target=stop, args=(tag,), daemon=True) for tag in launched]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=60)
        for tag in tags:
            records[tag]["seconds"] = round(run.now() - records[tag]["t_start_s"], 2)
            records[tag]["ok"] = records[tag].get("ready_after_launch_s") is not None and "verify" in records[tag]
        record["checks"] = {
            **record["plan_checks"],
            "both_ready": "failed" not in (record.get("wait") or {"failed": "not waited"}),
            "both_verified": record.get("both_verified", False),
            "verified_concurrently": record.get("verified_concurrently", False),
            "memory_only_on_own_gpu": record.get("memory_only_on_own_gpu") == "pass",
            "mandatory_env": all(records[tag].get("mandatory_env") == MANDATORY_ENV for tag in tags),
        }
    if placement and not placement["ok"]:
        raise AssertionError("memory on another instance's GPU: " + "; ".join(placement["problems"]))


def main() -> int:
    ap = argparse.ArgumentParser(description="real-hardware run of sglang-fleet's code against SGLang 0.5.17")
    ap.add_argument("--dry-run", action="store_true", help="plan with fake facts and pack results; no GPU, no SGLang")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET_S", "520")))
    ap.add_argument("--res", type=Path, default=Path(os.environ.get("HW_RES", "/tmp/hw-results")))
    ap.add_argument("--models", type=Path, default=Path("/tmp/hw-models"))
    args = ap.parse_args()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    run = Run(args.res, out, args.budget, float(os.environ.get("T0") or time.time()))
    run.summary["dry_run"] = args.dry_run
    os.environ.update(MANDATORY_ENV)
    if args.dry_run:
        return dry_run(run)
    try:
        return real_run(run, args.models)
    finally:
        finish(run, headline)


def finish(run: Run, summarize: Callable[[Run], None]) -> None:
    """The end of every run, however it ended: its servers killed, its headline (`summarize`), the summary written and
    the compile caches packed."""
    for p in run.procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
    run.summary["t_end_s"] = run.now()
    try:
        summarize(run)
    except Exception as error:
        run.message(f"headline: {error!r}")
    run.snapshot()
    pack_caches(run)


def dry_run(run: Run) -> int:
    """Plans h200.yml with the facts of one fake H200 and packs the result; prints the instance."""
    mods = project_modules()
    facts: Json = {
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-00000000-1111-2222-3333-444444444444",
                "name": "NVIDIA H200",
                "memory_total_mib": 143771,
                "memory_used_mib": 0,
                "driver_version": "580.159.04",
                "pci_bus_id": "00000000:00:05.0",
                "minor_number": 0,
                "device": "/dev/nvidia0",
            }
        ],
        "gpu_processes": [],
        "gpu_error": None,
        "driver_version": "580.159.04",
        "memtotal_mb": 131072,
        "glibc_version": "2.39",
        "listening": [],
        "device_nodes": {},
        "model": {
            "path": "/tmp/hw-models/tiny-mimo-mtp",
            "exists": True,
            "config": True,
            "architectures": ["MiMoForCausalLM"],
            "mtp_layers": 1,
            "total_size": 3_000_000,
            "tensor_count": 40,
            "has_mtp_tensors": False,
            "shards": 2,
            "shard_bytes": 3_000_000,
            "missing_shards": [],
            "empty_shards": [],
            "checksum_problems": {},
        },
    }
    with run.stage("plan") as record:
        plan = make_plan(mods, facts, run, "plan")
        record["problems"] = plan["problems"]
        record["instances"] = len(plan["instances"])
        instance = plan["instances"][0]
        record["argv"] = instance["argv"]
        record["environment"] = instance["environment"]
        record["bad_flag_argv"] = [*instance["argv"], "--no-such-flag", "8"]
        record["mem_argv"] = instance_argv_with(instance["argv"], mem_fraction_static="0.00001", port="30002", nccl_port="31002")
    with run.stage("ngram_plan") as record:
        ngram = make_plan(mods, facts, run, "ngram", sglang_speculative={"algorithm": "NGRAM", "num_draft_tokens": 4})
        record["problems"] = ngram["problems"]
        record["argv"] = ngram["instances"][0]["argv"] if ngram["instances"] else None
    second = {
        **facts["gpus"][0],
        "index": 1,
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "minor_number": 1,
        "pci_bus_id": "00000000:00:06.0",
        "device": "/dev/nvidia1",
    }
    facts2: Json = {**facts, "gpus": [facts["gpus"][0], second]}
    uuids = [gpu["uuid"] for gpu in facts2["gpus"]]
    with run.stage("tp2_plan") as record:
        tp2 = make_plan(mods, facts2, run, "tp2", host_vars="h200x2-tp2.yml")
        record["problems"] = tp2["problems"]
        record["argv"] = tp2["instances"][0]["argv"] if tp2["instances"] else None
        record["environment"] = tp2["instances"][0]["environment"] if tp2["instances"] else None
        if tp2["problems"] or len(tp2["instances"]) != 1:
            raise AssertionError(f"{len(tp2['instances'])} instance(s), problems {tp2['problems']}")
        assert record["environment"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids), record["environment"]
        assert flag_value(record["argv"], "--tp-size") == "2", record["argv"]
    with run.stage("per_gpu_plan") as record:
        per_gpu = make_plan(mods, facts2, run, "per_gpu", host_vars="h200x2-per-gpu.yml")
        record["problems"] = per_gpu["problems"]
        record["instances"] = [
            {key: i[key] for key in ("name", "port", "nccl_port", "argv", "environment")} for i in per_gpu["instances"]
        ]
        if per_gpu["problems"] or len(per_gpu["instances"]) != 2:
            raise AssertionError(f"{len(per_gpu['instances'])} instance(s), problems {per_gpu['problems']}")
        assert [i["environment"]["CUDA_VISIBLE_DEVICES"] for i in per_gpu["instances"]] == uuids
        assert len({i["nccl_port"] for i in per_gpu["instances"]}) == 2
    with run.stage("plan_gpu0_of_2") as record:  # h200.yml on a 2-GPU machine, kept to GPU 0 as real_run does
        gpu0 = make_plan(mods, facts2, run, "plan_gpu0_of_2", sglang_gpu_ids=[0])
        record["instances"] = len(gpu0["instances"])
        assert len(gpu0["instances"]) == 1 and gpu0["instances"][0]["environment"]["CUDA_VISIBLE_DEVICES"] == uuids[0]
        assert gpu0["instances"][0]["argv"] == instance["argv"], "h200.yml renders differently on two GPUs"
    with run.stage("placement") as record:  # the mapping of compute apps to process trees, on this process
        me = os.getpid()
        apps = f"{me}, {uuids[0]}, 1000, python3\n{me}, {uuids[1]}, 10, python3\n"
        good = gpu_placement(apps, {"a": (me, [uuids[0], uuids[1]])})
        bad = gpu_placement(apps, {"a": (me, [uuids[0]])})
        record["good"], record["bad"] = good["ok"], bad["problems"]
        assert good["ok"] and not bad["ok"], (good, bad)
    print(json.dumps(run.summary, indent=1, default=str))
    ok = all(stage.get("ok") for stage in run.summary["stages"].values())
    return 0 if ok else 1


def real_run(run: Run, models: Path) -> int:
    run.log(f"driver start; budget {run.left():.0f} s left; python {sys.version.split()[0]}")
    with run.stage("models") as record:
        stage_models(run, models, record)
    with run.stage("nvidia_smi") as record:
        stage_nvidia_smi(run, record)
    with run.stage("env") as record:
        stage_env(run, record)
    mods = project_modules()
    facts: Json = {}
    with run.stage("facts") as record:
        facts = stage_facts(run, mods, models / "tiny-mimo-mtp", record)
    uuids = [str(gpu["uuid"]) for gpu in facts.get("gpus") or []]
    with run.stage("cuda_smoke", needs_s=300) as record:
        if "skipped" not in record:
            stage_cuda_smoke(run, uuids, record)
    # Two GPUs: the two-GPU stages first (the single-GPU ones below are recorded already), and the single-GPU
    # host's plan kept to GPU 0 (h200.yml names no GPUs: on two it would plan one instance per GPU).
    count = gpu_count(run, facts)
    run.summary["gpu_count"] = count
    two = count["count"] >= 2 and len(uuids) >= 2
    why = "" if two else f"{count['count']} GPU(s) by {count['source']}, nvidia-smi lists {len(uuids)}; the stage needs 2"
    with run.stage("tp2", needs_s=150, skip=why) as record:
        if "skipped" not in record:
            stage_tp2(run, mods, facts, record)
    with run.stage("per_gpu", needs_s=130, skip=why) as record:
        if "skipped" not in record:
            stage_per_gpu(run, mods, facts, record)
    single: Json = {"sglang_gpu_ids": [0]} if two else {}
    instance: Json | None = None
    with run.stage("plan") as record:
        plan = make_plan(mods, facts, run, "plan", **single)
        record["support_table"] = plan["support_table"]
        record["problems"] = plan["problems"]
        record["instances"] = len(plan["instances"])
        if not plan["instances"]:
            raise RuntimeError("the plan derived no instance")
        instance = plan["instances"][0]
        record["argv"] = instance["argv"]
        record["environment"] = instance["environment"]
    if instance is None:
        return 1

    failures: Json = {}
    run.summary["stages"]["failures"] = failures

    def failure_runs() -> None:
        assert instance is not None
        base = instance["argv"]
        for tag, argv, max_s in (
            ("failure.unknown_flag", [*instance_argv_with(base, port="30001", nccl_port="31001"), "--no-such-flag", "8"], 90),
            (
                "failure.mem_0.00001",
                instance_argv_with(base, mem_fraction_static="0.00001", port="30002", nccl_port="31002"),
                150,
            ),
        ):
            rec: Json = failures.setdefault(tag, {"t_start_s": run.now()})
            if run.left() < max_s + 30:
                rec["skipped"] = f"{run.left():.0f} s left"
                continue
            try:
                failure_run(run, tag, argv, instance["environment"], max_s, rec)
            except Exception as error:
                rec["error"] = f"{type(error).__name__}: {error}"
                rec["traceback"] = traceback.format_exc()
        run.snapshot()

    failure_thread = threading.Thread(target=failure_runs, daemon=True)
    with run.stage("nextn", needs_s=120) as record:
        if "skipped" not in record:
            failure_thread.start()
            stage_nextn(run, mods, facts, instance, record, ready_timeout=min(330.0, run.left() - 60), **single)
    if failure_thread.is_alive():
        failure_thread.join(timeout=max(1.0, run.left() - 100))
    with run.stage("ngram", needs_s=150) as record:
        if "skipped" not in record:
            ngram = make_plan(
                mods, facts, run, "ngram", sglang_speculative={"algorithm": "NGRAM", "num_draft_tokens": 4}, **single
            )
            record["problems"] = ngram["problems"]
            if not ngram["instances"]:
                raise RuntimeError("the NGRAM plan derived no instance")
            serve_and_verify(run, mods, "ngram", ngram["instances"][0], record, ready_timeout=min(240.0, run.left() - 40))
    if failure_thread.is_alive():
        failure_thread.join(timeout=max(1.0, run.left() - 10))
    return 0


def headline(run: Run) -> None:
    """The figures a reader wants first, gathered into summary['headline']."""
    stages = run.summary["stages"]
    head: Json = {}
    for tag in ("nextn", "ngram"):
        st = stages.get(tag) or {}
        head[tag] = {
            "ready_after_launch_s": st.get("ready_after_launch_s"),
            "wait": st.get("wait"),
            "verify": st.get("verify", st.get("verify_error")),
            "probe_tokens_per_s": (st.get("probe") or {}).get("tokens_per_s"),
            "running_requests": st.get("running_requests"),
            "sigterm": st.get("sigterm"),
            "error": st.get("error"),
        }
    head["nextn"].update(
        {key: (stages.get("nextn") or {}).get(key) for key in ("checks", "failed_checks", "server_args_line", "auth")}
    )
    for tag, st in (stages.get("failures") or {}).items():
        head[tag] = {k: st.get(k) for k in ("returncode", "seconds_to_exit", "error_lines", "skipped", "error")}
    for tag in ("tp2", "per_gpu"):
        st = stages.get(tag) or {}
        head[tag] = {key: st.get(key) for key in ("skipped", "error", "problems", "checks")}
    head["tp2"].update(
        {
            key: (stages.get("tp2") or {}).get(key)
            for key in ("ready_after_launch_s", "verify", "verify_error", "cuda_smoke_all_reduce", "sigterm")
        }
    )
    head["tp2"]["probe_tokens_per_s"] = ((stages.get("tp2") or {}).get("probe") or {}).get("tokens_per_s")
    head["tp2"]["batch_probe"] = {
        key: ((stages.get("tp2") or {}).get("batch_probe") or {}).get(key)
        for key in ("tokens_total", "seconds", "tokens_per_s", "ok")
    }
    per_gpu = stages.get("per_gpu") or {}
    head["per_gpu"].update(
        {
            key: per_gpu.get(key)
            for key in ("wait", "verified_concurrently", "memory_only_on_own_gpu", "gpu_memory_by_instance", "placement_problems")
        }
    )
    for tag in per_gpu.get("instance_stages") or []:
        st = stages.get(tag) or {}
        head[tag] = {key: st.get(key) for key in ("ready_after_launch_s", "verify", "verify_error", "sigterm", "error")}
    head["gpu_count"] = run.summary.get("gpu_count")
    head["cuda_smoke"] = stages.get("cuda_smoke")
    head["plan_problems"] = (stages.get("plan") or {}).get("problems")
    run.summary["headline"] = head


def pack_caches(run: Run) -> None:
    """The tvm-ffi JIT and Triton caches this run used, as $OUT/caches.tar.gz, to seed the next bundle."""
    if run.out is None:
        return
    try:
        tmp = run.out / "caches.tar.gz.part"
        with tarfile.open(tmp, "w:gz") as tf:
            for env, arc in (("TVM_FFI_CACHE_DIR", "tvm-ffi"), ("TRITON_CACHE_DIR", "triton")):
                path = os.environ.get(env)
                if path and os.path.isdir(path):
                    tf.add(
                        path,
                        arcname=arc,
                        filter=lambda ti: None if ti.name.endswith((".o", ".o.d", ".lock", ".ninja_log")) else ti,
                    )
        if tmp.stat().st_size < 15 * 2**20:
            os.replace(tmp, run.out / "caches.tar.gz")
        else:
            run.message(f"caches.tar.gz not returned: {tmp.stat().st_size} bytes")
            tmp.unlink()
    except Exception as error:
        run.message(f"pack_caches: {error!r}")


if __name__ == "__main__":
    sys.exit(main())
