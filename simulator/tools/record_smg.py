"""Records what the real SGLang Model Gateway (smg) answers, in front of two simulator workers on loopback.

    python simulator/tools/record_smg.py SMG_EXECUTABLE OUT_DIR

SMG_EXECUTABLE is the ``smg`` console script of a venv holding the pinned wheel (``pip install
smg==1.13.0``); the workers are this checkout's simulator (SGLang 0.5.23 mode). Writes
``OUT_DIR/answers.json`` (each route's status and body, the worker registry's answers, the drain timelines,
the paths the gateway asked the workers for, its answers to a second POST of a URL whose addition is still in
progress and to GET /workers/{id} of that addition) and ``OUT_DIR/metrics.healthy.txt`` /
``metrics.unhealthy.txt`` (its Prometheus exposition with both workers healthy, and with one stopped).
Timings are wall-clock seconds on the recording machine: the figures, not a contract.

    python simulator/tools/record_smg.py policy OUT_JSON smg=/tmp/smgvenv/bin/python \
        sglang-router=/tmp/srvenv/bin/python

records whether each router (``NAME=PYTHON``: the Python of a venv holding it, its entry point run as the
fleet's launcher runs it) starts with ``--policy power_of_two`` as the fleet starts it - no workers on its
command line, registered through ``POST /workers`` once it answers - in its single-pool mode and in its
multi-model mode (``--enable-igw``), and how it then spreads 20 requests over the two workers.

    python simulator/tools/record_smg.py mesh SMG_EXECUTABLE OUT_DIR

records two gateways in a mesh (``--enable-mesh``) on loopback: whether workers registered on one appear
on the other, what each answers as one stops and starts again (``OUT_DIR/mesh-answers.json``, and each
one's mesh log lines, ``mesh-log-a.txt`` / ``mesh-log-b.txt``); tests/recordings/smg-1.13.0-mesh/README.md
says what it showed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENT_KEY = "client-key-recorded"
ADMIN_KEY = "admin-key-recorded"
MODEL = "m"
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
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


def call(url: str, method: str = "GET", body: Any = None, key: str = "") -> tuple[int, str]:
    request = urllib.request.Request(
        url, method=method, data=None if body is None else json.dumps(body).encode()
    )
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError as error:
        return 0, repr(error)


def decoded(answer: tuple[int, str]) -> dict[str, Any]:
    status, text = answer
    try:
        return {"status": status, "body": json.loads(text)}
    except ValueError:
        return {"status": status, "body_text": text}


def manifest(path: Path, urls: list[str]) -> None:
    """Writes the discovery manifest as the fleet does: a temporary file renamed over it."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps({"version": 1, "workers": [{"url": url, "model_id": MODEL} for url in urls]}))
    part.replace(path)


def states(gateway: str) -> list[list[Any]]:
    status, text = call(gateway + "/workers", key=ADMIN_KEY)
    if status != 200:
        return [["(no answer)", status, False]]
    listed = json.loads(text)["workers"]
    return sorted([worker["url"], worker.get("status"), worker.get("is_healthy")] for worker in listed)


def timeline(gateway: str, seconds: float, until: Any) -> list[list[Any]]:
    """Each change of the registry's (url, status, healthy) list, with the seconds since the start, until
    `until`."""
    start = time.monotonic()
    seen: list[list[Any]] = []
    while time.monotonic() - start < seconds:
        now = states(gateway)
        if not seen or seen[-1][1] != now:
            seen.append([round(time.monotonic() - start, 2), now])
        if until(now):
            break
        time.sleep(0.05)
    return seen


def start_workers(started: list[subprocess.Popen[Any]]) -> tuple[Path, list[str], list[Path]]:
    """Two simulator workers (SGLang 0.5.23 mode, --api-key) on 127.0.0.1:31000 and :31001, answering /health:
    the work folder, their URLs and their logs (uvicorn-style access lines)."""
    work = Path(tempfile.mkdtemp(prefix="record-smg-"))
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    (model / "model.safetensors").write_bytes(b"\0" * 1024)
    gpus = work / "gpus.json"
    uuid = "GPU-5e1a0000-0000-4000-8000-{:012d}"
    listed = [
        {"index": i, "name": "NVIDIA B200", "memory_total_mib": 183359, "uuid": uuid.format(i)}
        for i in range(3)
    ]
    gpus.write_text(json.dumps({"driver_version": "580.95.05", "cuda_version": "13.0", "gpus": listed}))
    ports = [31000, 31001]
    logs = [start_worker(work, port, index, started) for index, port in enumerate(ports)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    for url in urls:
        while call(url + "/health")[0] != 200:
            time.sleep(0.1)
    return work, urls, logs


def start_worker(work: Path, port: int, gpu: int, started: list[subprocess.Popen[Any]]) -> Path:
    """One simulator worker of start_workers' work folder on 127.0.0.1:`port` (GPU `gpu`): its log."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SGLANG", "SGL_"))}
    env.update(PYTHONPATH=str(ROOT / "simulator" / "src"), SGLANG_SIM_GPUS_FILE=str(work / "gpus.json"))
    env.update(SGLANG_SIM_STATE_DIR=str(work / "state"), SGLANG_SIM_LOAD_SECONDS="0.2")
    env.update(SGLANG_SIM_WARMUP_SECONDS="0.2", SGLANG_SIM_HEALTH_SECONDS="0", SGLANG_SIM_STOP_SECONDS="0.2")
    argv = [sys.executable, "-m", "sglang_simulator", "--model-path", str(work / "model"),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--api-key", CLIENT_KEY]  # fmt: skip
    log = work / f"worker-{port}.log"
    with log.open("w") as out:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        started.append(subprocess.Popen(argv, env=env, stdout=out, stderr=out))
    return log


def addition_in_progress(gateway: str, work: Path, started: list[subprocess.Popen[Any]]) -> dict[str, Any]:
    """Two POSTs in a row of a worker URL that does not answer yet (the fleet's launcher registering its
    workers file while sglang_router_members adds the same URL), GET /workers/{id} while that addition
    waits, then once the worker has started and been listed healthy."""
    url = "http://127.0.0.1:31002"
    body = {"url": url, "model_id": MODEL, "api_key": CLIENT_KEY}
    first = decoded(call(gateway + "/workers", "POST", body, ADMIN_KEY))
    second = decoded(call(gateway + "/workers", "POST", body, ADMIN_KEY))
    worker_id = first.get("body", {}).get("worker_id", "")
    time.sleep(1)
    waiting = decoded(call(f"{gateway}/workers/{worker_id}", key=ADMIN_KEY))
    start = time.monotonic()
    start_worker(work, 31002, 2, started)
    listed = timeline(gateway, 60, lambda now: any(s[0] == url and s[2] for s in now))
    return {
        "POST /workers (addition in progress)": {"first": first, "second": second},
        "GET /workers/{id} (addition in progress)": {
            "while in progress": waiting,
            "after": decoded(call(f"{gateway}/workers/{worker_id}", key=ADMIN_KEY)),
        },
        "addition in progress, after the worker started": listed,
        "addition in progress, listed healthy after the worker started_s": round(time.monotonic() - start, 2),
    }


def main(smg: str, out: Path, started: list[subprocess.Popen[Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work, urls, _ = start_workers(started)
    workers = started[-2:]
    ports = [31000, 31001]
    discovery = work / "workers.json"
    manifest(discovery, urls)
    gateway, metrics_url = "http://127.0.0.1:31100", "http://127.0.0.1:31190"
    argv = [smg, "launch", "--host", "127.0.0.1", "--port", "31100", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", "31190", "--discovery-provider", "file", "--discovery-file", str(discovery),
            "--discovery-check-interval-secs", "3", "--policy", "power_of_two",
            "--health-check-interval-secs", "2",
            "--log-level", "info", "--api-key", CLIENT_KEY,
            "--control-plane-api-keys", "fleet:sglang-fleet:admin:" + ADMIN_KEY]  # fmt: skip
    smg_log = (work / "smg.log").open("w")
    router = subprocess.Popen(argv, stdout=smg_log, stderr=smg_log)
    started.append(router)
    answers: dict[str, Any] = {
        "smg_argv": [re.sub(r"/tmp/record-smg-\w+", "<work>", word) for word in argv[1:]]
    }
    start = time.monotonic()
    answers["start"] = timeline(gateway, 30, lambda now: len(now) == 2 and all(state[2] for state in now))
    answers["ready_after_start_s"] = round(time.monotonic() - start, 2)
    for path in ("/liveness", "/readiness", "/health", "/v1/models"):
        answers[f"GET {path}"] = decoded(call(gateway + path))
    answers["GET /workers (no key)"] = decoded(call(gateway + "/workers"))
    answers["GET /workers (client key)"] = decoded(call(gateway + "/workers", key=CLIENT_KEY))
    answers["GET /workers"] = decoded(call(gateway + "/workers", key=ADMIN_KEY))
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    answers["POST /v1/chat/completions (client key)"] = {
        "status": call(gateway + "/v1/chat/completions", "POST", chat, CLIENT_KEY)[0]
    }
    answers["POST /v1/chat/completions (admin key)"] = {
        "status": call(gateway + "/v1/chat/completions", "POST", chat, ADMIN_KEY)[0]
    }
    answers["POST /v1/chat/completions (no key)"] = {
        "status": call(gateway + "/v1/chat/completions", "POST", chat)[0]
    }
    (out / "metrics.healthy.txt").write_text(call(metrics_url + "/metrics")[1])
    # The admin API's removal of a worker the manifest lists: drained, unlisted, discovered again.
    second = next(w for w in answers["GET /workers"]["body"]["workers"] if w["url"] == urls[1])
    answers["DELETE /workers/{id}"] = decoded(
        call(f"{gateway}/workers/{second['id']}", "DELETE", key=ADMIN_KEY)
    )
    answers["after DELETE"] = timeline(
        gateway, 15, lambda now: len(now) == 2 and all(s[1] == "ready" for s in now)
    )
    # Removing the worker from the manifest: drained, then unlisted.
    manifest(discovery, urls[:1])
    answers["after manifest removal"] = timeline(gateway, 15, lambda now: len(now) == 1)
    answers["GET /readiness (one worker)"] = decoded(call(gateway + "/readiness"))
    manifest(discovery, urls)
    answers["after manifest addition"] = timeline(
        gateway, 15, lambda now: len(now) == 2 and all(s[2] for s in now)
    )
    # A worker added through the admin API beside discovery's: left alone by the manifest's rereads.
    manifest(discovery, urls[:1])
    timeline(gateway, 15, lambda now: len(now) == 1)
    answers["POST /workers"] = decoded(
        call(
            gateway + "/workers",
            "POST",
            {"url": urls[1], "model_id": MODEL, "api_key": CLIENT_KEY},
            ADMIN_KEY,
        )
    )
    answers["after POST"] = timeline(gateway, 15, lambda now: len(now) == 2 and all(s[2] for s in now))
    time.sleep(4)  # more than one reread (--discovery-check-interval-secs 3)
    answers["POST-added after a reread"] = states(gateway)
    # One worker stopped: the registry and the metrics as the health checks see it.
    workers[1].send_signal(signal.SIGINT)
    workers[1].wait(30)
    answers["after a worker stopped"] = timeline(gateway, 20, lambda now: any(not s[2] for s in now))
    answers["GET /readiness (one worker down)"] = decoded(call(gateway + "/readiness"))
    (out / "metrics.unhealthy.txt").write_text(call(metrics_url + "/metrics")[1])
    answers.update(addition_in_progress(gateway, work, started))
    router.send_signal(signal.SIGTERM)
    stop = time.monotonic()
    answers["stop_returncode"] = router.wait(60)
    answers["stop_seconds"] = round(time.monotonic() - stop, 2)
    workers[0].send_signal(signal.SIGINT)
    workers[0].wait(30)
    polled = re.findall(
        r'"(GET|POST) (/[^ ?"]*)(\?[^ "]*)? HTTP', (work / f"worker-{ports[0]}.log").read_text()
    )
    answers["worker paths the gateway asked"] = sorted(
        {method + " " + path + query for method, path, query in polled}
    )
    (out / "answers.json").write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")


def stop_all(started: list[subprocess.Popen[Any]]) -> None:
    """Kill and reap every process of `started` still running: a recording leaves none behind."""
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def record(smg: str, out: Path) -> None:
    """main(), leaving no process behind when it fails."""
    started: list[subprocess.Popen[Any]] = []
    try:
        main(smg, out, started)
    finally:
        stop_all(started)


ENTRY_POINTS = {"smg": "smg.launch_router", "sglang-router": "sglang_router.launch_router"}
GATEWAY = "http://127.0.0.1:31100"


def try_router(python: str, entry_point: str, mode: list[str], urls: list[str], logs: Path) -> dict[str, Any]:
    argv = [python, "-m", entry_point, "--host", "127.0.0.1", "--port", "31100", "--prometheus-port", "31190",
            "--policy", "power_of_two", "--log-level", "warn", "--api-key", CLIENT_KEY,
            "--control-plane-api-keys", "fleet:sglang-fleet:admin:" + ADMIN_KEY, *mode]  # fmt: skip
    log = logs / f"{entry_point}{''.join(mode)}.log"
    router = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while router.poll() is None and call(GATEWAY + "/liveness")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        if router.poll() is not None:
            lines = log.read_text().splitlines()
            first = next(i for i, line in enumerate(lines) if "panicked at" in line or "Error: " in line)
            cause = [line.strip() for line in lines[first : first + 2] if "panicked at" not in line]
            return {"started": False, "returncode": router.returncode, "error": cause}
        for url in urls:
            call(
                GATEWAY + "/workers",
                "POST",
                {"url": url, "model_id": MODEL, "api_key": CLIENT_KEY},
                ADMIN_KEY,
            )
        while (
            call(GATEWAY + "/readiness")[1].count('"healthy_workers":2') == 0 and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        statuses = [call(GATEWAY + "/v1/chat/completions", "POST", chat, CLIENT_KEY)[0] for _ in range(20)]
        listed = json.loads(call(GATEWAY + "/workers", key=ADMIN_KEY)[1])["workers"]
        return {
            "started": True,
            "statuses": sorted(set(statuses)),
            "workers": sorted(w["url"] for w in listed),
        }
    finally:
        if router.poll() is None:
            router.terminate()
            router.wait(30)


def record_policy(out: Path, routers: dict[str, str]) -> None:
    """The power_of_two recording (see the module's docstring)."""
    started: list[subprocess.Popen[Any]] = []
    try:
        work, urls, logs = start_workers(started)
        result: dict[str, Any] = {}
        for name, python in routers.items():
            for mode in ([], ["--enable-igw"]):
                chats = "POST /v1/chat/completions"
                before = [log.read_text().count(chats) for log in logs]
                answer = try_router(python, ENTRY_POINTS[name], mode, urls, work)
                if answer["started"]:
                    after = [log.read_text().count(chats) for log in logs]
                    answer["served_per_worker"] = [b - a for a, b in zip(before, after, strict=True)]
                result[f"{name} {' '.join(mode) or 'single-pool'}"] = answer
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    finally:
        stop_all(started)


MESH = {"a": ("31100", "31190", "31527"), "b": ("31101", "31191", "31528")}
# Each mesh gateway's port, Prometheus port and mesh port: MESH's, and the third one of record_mesh_tls.
PORTS = {**MESH, "c": ("31102", "31192", "31529")}


def mesh_argv(smg: str, name: str, peers: list[str]) -> list[str]:
    """smg gateway `name` of MESH on loopback, in a mesh (--enable-mesh) that joins `peers` (host:port)."""
    port, metrics, mesh = PORTS[name]
    return [smg, "launch", "--host", "127.0.0.1", "--port", port, "--prometheus-host", "127.0.0.1",
            "--prometheus-port", metrics, "--health-check-interval-secs", "2", "--log-level", "info",
            "--api-key", CLIENT_KEY, "--control-plane-api-keys", "fleet:sglang-fleet:admin:" + ADMIN_KEY,
            "--enable-mesh", "--mesh-server-name", "gw-" + name, "--mesh-host", "127.0.0.1",
            "--mesh-port", mesh] + (["--mesh-peer-urls", *peers] if peers else [])  # fmt: skip


def start_mesh_gateway(smg: str, name: str, peers: list[str], work: Path) -> subprocess.Popen[Any]:
    """mesh_argv's gateway, its log in `work`."""
    log = (work / f"smg-{name}.log").open("a")
    return subprocess.Popen(mesh_argv(smg, name, peers), stdout=log, stderr=log)


def add_url(gateway: str, url: str) -> dict[str, Any]:
    """POST /workers of the worker at `url` on `gateway`."""
    body = {"url": url, "model_id": MODEL, "api_key": CLIENT_KEY}
    return decoded(call(gateway + "/workers", "POST", body, ADMIN_KEY))


def delete_url(gateway: str, url: str) -> dict[str, Any]:
    """DELETE /workers/{id} of the worker at `url` on `gateway`."""
    listed = json.loads(call(gateway + "/workers", key=ADMIN_KEY)[1])["workers"]
    worker = next(w for w in listed if w["url"] == url)
    return decoded(call(f"{gateway}/workers/{worker['id']}", "DELETE", key=ADMIN_KEY))


def mesh_status(url: str) -> dict[str, Any]:
    """What one gateway answers: /liveness, /readiness, its registry and a chat completion."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return {
        "GET /liveness": decoded(call(url + "/liveness")),
        "GET /readiness": decoded(call(url + "/readiness")),
        "workers": states(url),
        "POST /v1/chat/completions": call(url + "/v1/chat/completions", "POST", chat, CLIENT_KEY)[0],
    }


def record_mesh(smg: str, out: Path) -> None:
    """Two smg gateways in a mesh on loopback (see README): what each lists and answers as workers are added
    to one, removed from it, and as one stops and starts again."""
    started: list[subprocess.Popen[Any]] = []
    try:
        work, urls, _ = start_workers(started)
        url = {name: "http://127.0.0.1:" + MESH[name][0] for name in MESH}
        answers: dict[str, Any] = {}
        gateways = {"a": start_mesh_gateway(smg, "a", [], work)}
        gateways["b"] = start_mesh_gateway(smg, "b", ["127.0.0.1:" + MESH["a"][2]], work)
        started.extend(gateways.values())
        for name in MESH:
            while call(url[name] + "/liveness")[0] != 200:
                time.sleep(0.1)
        answers["argv b"] = mesh_argv(smg, "b", ["127.0.0.1:" + MESH["a"][2]])[1:]
        answers["started"] = {name: mesh_status(url[name]) for name in MESH}
        answers["POST /workers on a"] = [add_url(url["a"], worker) for worker in urls]
        answers["b after POST on a"] = timeline(
            url["b"], 20, lambda now: len(now) == 2 and all(s[2] for s in now)
        )
        answers["a after POST on a"] = states(url["a"])
        answers["both workers on a"] = {name: mesh_status(url[name]) for name in MESH}
        # A worker removed from a: removed from b?
        answers["DELETE /workers/{id} on a"] = delete_url(url["a"], urls[1])
        answers["b after DELETE on a"] = timeline(url["b"], 20, lambda now: len(now) == 1)
        answers["a after DELETE on a"] = states(url["a"])
        # A worker added on b: on a?
        answers["POST /workers on b"] = add_url(url["b"], urls[1])
        answers["a after POST on b"] = timeline(
            url["a"], 20, lambda now: len(now) == 2 and all(s[2] for s in now)
        )
        # A worker a never had, added on b: on a?
        start_worker(work, 31002, 2, started)
        while call("http://127.0.0.1:31002/health")[0] != 200:
            time.sleep(0.1)
        answers["POST /workers on b (new url)"] = add_url(url["b"], "http://127.0.0.1:31002")
        answers["a after POST on b (new url)"] = timeline(url["a"], 20, lambda now: len(now) == 2)
        delete_url(url["b"], "http://127.0.0.1:31002")
        answers["a after DELETE on b (new url)"] = timeline(url["a"], 20, lambda now: len(now) == 1)
        # a stops: what b answers.
        gateways["a"].send_signal(signal.SIGTERM)
        stop = time.monotonic()
        answers["a stop_returncode"] = gateways["a"].wait(60)
        answers["a stop_seconds"] = round(time.monotonic() - stop, 2)
        answers["b while a is stopped"] = mesh_status(url["b"])
        time.sleep(10)
        answers["b 10 s after a stopped"] = mesh_status(url["b"])
        # A worker removed on b while a is down; a starts again with b as its peer: what it lists.
        answers["DELETE /workers/{id} on b while a is stopped"] = delete_url(url["b"], urls[1])
        timeline(url["b"], 20, lambda now: len(now) == 1)
        gateways["a"] = start_mesh_gateway(smg, "a", ["127.0.0.1:" + MESH["b"][2]], work)
        started.append(gateways["a"])
        start = time.monotonic()
        while call(url["a"] + "/liveness")[0] != 200:
            time.sleep(0.1)
        answers["a live again after_s"] = round(time.monotonic() - start, 2)
        answers["a after restart (peer b)"] = timeline(url["a"], 20, lambda now: len(now) == 1 and now[0][2])
        answers["a 20 s after restart"] = mesh_status(url["a"])
        for name in MESH:
            gateways[name].send_signal(signal.SIGTERM)
            gateways[name].wait(60)
        # --mesh-host 0.0.0.0 without --mesh-advertise-host.
        log = work / "smg-wildcard.log"
        argv = [smg, "launch", "--host", "127.0.0.1", "--port", MESH["a"][0], "--enable-mesh",
                "--mesh-host", "0.0.0.0", "--mesh-port", MESH["a"][2]]  # fmt: skip
        wildcard = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
        started.append(wildcard)
        try:
            returncode: int | str = wildcard.wait(15)
        except subprocess.TimeoutExpired:
            returncode = "still running after 15 s"
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text())
        answers["--mesh-host 0.0.0.0 without --mesh-advertise-host"] = {
            "returncode": returncode,
            "error": [line for line in text.splitlines() if re.search("advertise|error", line, re.I)][:5],
        }
        out.mkdir(parents=True, exist_ok=True)
        (out / "mesh-answers.json").write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
        for name in MESH:
            text = re.sub(r"\x1b\[[0-9;]*m", "", (work / f"smg-{name}.log").read_text())
            # Less the lines each gossip round repeats (connected, pinged, merged, no peer to dial).
            repeated = "Connecting to peer|Successfully connected|Round \\d+ Status|Received Ping|from Ping"
            repeated += "|No peer addr|Alive }$"
            lines = [
                line
                for line in text.splitlines()
                if re.search("mesh|peer|gossip|sync|cluster", line, re.I) and not re.search(repeated, line)
            ]
            (out / f"mesh-log-{name}.txt").write_text("\n".join(lines) + "\n")
    finally:
        stop_all(started)


def record_mesh_tls(smg: str, out: Path) -> None:
    """Two mesh gateways over TLS (--mesh-tls-*) on loopback, each with a certificate of scripts/test_ca.py's
    throw-away CA (SAN 127.0.0.1), and a third one without TLS that names the first as its peer: whether
    workers registered on one appear on the others; with a certificate for serverAuth only (`server-auth`),
    then for serverAuth and clientAuth (`server-and-client-auth`)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import test_ca  # the recorder's own helper, not the product's

    answers: dict[str, Any] = {}
    logs: dict[str, list[str]] = {}
    for name, usages in (("server-auth", test_ca.USAGES[:1]), ("server-and-client-auth", test_ca.USAGES)):
        logs = {
            gateway: [*lines, f"# {name}"] for gateway, lines in (logs or {"a": [], "b": [], "c": []}).items()
        }
        answers[name] = mesh_tls_case(smg, partial(test_ca.make, names=["127.0.0.1"], usages=usages), logs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mesh-tls-answers.json").write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    for name, lines in logs.items():
        (out / f"mesh-tls-log-{name}.txt").write_text("\n".join(lines) + "\n")


def mesh_tls_case(smg: str, make_tls: Any, logs: dict[str, list[str]]) -> dict[str, Any]:
    """One case of record_mesh_tls: its answers (each gateway's log lines about TLS and peers: to `logs`)."""
    started: list[subprocess.Popen[Any]] = []
    try:
        work, urls, _ = start_workers(started)
        make_tls(work / "tls")
        files = {"ca-cert": "ca.pem", "cert": "server.pem", "key": "server.key"}
        tls = [
            word for flag, file in files.items() for word in (f"--mesh-tls-{flag}", str(work / "tls" / file))
        ]
        peer = "127.0.0.1:" + MESH["a"][2]
        argvs = {"a": mesh_argv(smg, "a", []) + tls, "b": mesh_argv(smg, "b", [peer]) + tls}
        argvs["c"] = mesh_argv(smg, "c", [peer])
        url = {name: "http://127.0.0.1:" + PORTS[name][0] for name in argvs}
        for name, argv in argvs.items():
            log = (work / f"smg-{name}.log").open("a")
            started.append(subprocess.Popen(argv, stdout=log, stderr=log))
        for name in argvs:
            while call(url[name] + "/liveness")[0] != 200 and started[-1].poll() is None:
                time.sleep(0.1)
        answers: dict[str, Any] = {
            "argv " + name: [re.sub(r"/tmp/record-smg-\w+", "<work>", word) for word in argv[1:]]
            for name, argv in argvs.items()
        }
        answers["POST /workers on a"] = add_url(url["a"], urls[0])
        answers["b after POST on a"] = timeline(url["b"], 20, lambda now: len(now) == 1 and now[0][2])
        answers["c after POST on a"] = timeline(url["c"], 20, lambda now: len(now) == 1)
        answers["POST /workers on c"] = add_url(url["c"], urls[1])
        answers["a after POST on c"] = timeline(url["a"], 20, lambda now: len(now) == 2)
        answers["chat"] = {name: mesh_status(url[name]) for name in argvs}
        for process in started[-3:]:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        for name in argvs:
            text = re.sub(r"\x1b\[[0-9;]*m", "", (work / f"smg-{name}.log").read_text())
            pattern = "tls|certificate|handshake|mesh server|failed to connect|error connecting|mesh-synced"
            lines = [line[20:] for line in text.splitlines() if re.search(pattern, line, re.I)]
            logs.setdefault(name, []).extend(sorted(set(lines), key=lines.index)[:12])
        return answers
    finally:
        stop_all(started)


def record_mesh_names(smg: str, out: Path) -> None:
    """Whether smg's mesh takes host names: `--mesh-advertise-host localhost`, `--mesh-peer-urls
    localhost:<port>` (each: its exit status and error), and a mesh over TLS between IP addresses with a
    certificate that names `localhost` alone (DNS), no IP (whether a worker registered on one gateway appears
    on the other)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import test_ca  # the recorder's own helper, not the product's

    started: list[subprocess.Popen[Any]] = []
    answers: dict[str, Any] = {}
    try:
        work, urls, _ = start_workers(started)
        wildcard = ["--mesh-host", "0.0.0.0", "--mesh-advertise-host"]
        for case, argv in (
            ("--mesh-advertise-host localhost", [*mesh_argv(smg, "a", []), *wildcard, "localhost"]),
            ("--mesh-peer-urls localhost:31527", mesh_argv(smg, "b", ["localhost:" + MESH["a"][2]])),
        ):
            log = work / "smg-name.log"
            ended = subprocess.run(
                argv, stdout=log.open("w"), stderr=subprocess.STDOUT, timeout=30, check=False
            )
            text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text())
            errors = [line for line in text.splitlines() if line.startswith(("Error", "ValueError"))]
            answers[case] = {"returncode": ended.returncode, "error": errors}
        test_ca.make(work / "tls", ["localhost"])
        files = {"ca-cert": "ca.pem", "cert": "server.pem", "key": "server.key"}
        tls = [
            word for flag, file in files.items() for word in (f"--mesh-tls-{flag}", str(work / "tls" / file))
        ]
        argvs = {
            "a": mesh_argv(smg, "a", []) + tls,
            "b": mesh_argv(smg, "b", ["127.0.0.1:" + MESH["a"][2]]) + tls,
        }
        for name, argv in argvs.items():
            log_file = (work / f"smg-{name}.log").open("w")
            started.append(subprocess.Popen(argv, stdout=log_file, stderr=log_file))
        url = {name: "http://127.0.0.1:" + MESH[name][0] for name in argvs}
        for name in argvs:
            while call(url[name] + "/liveness")[0] != 200:
                time.sleep(0.1)
        answer = add_url(url["a"], urls[0])
        answers["certificate for DNS:localhost, peers by IP"] = {
            "POST /workers on a": answer["status"],
            "b after POST on a": timeline(url["b"], 20, lambda now: len(now) == 1),
        }
        for name in argvs:
            started[-1 if name == "b" else -2].kill()
        # IPv6: both on ::1, b dialling a at "[::1]:<port>" (no TLS).
        for name in argvs:
            argv = mesh_argv(smg, name, ["[::1]:" + MESH["a"][2]] if name == "b" else [])
            argv[argv.index("--mesh-host") + 1] = "::1"
            log_file = (work / f"smg-{name}-v6.log").open("w")
            started.append(subprocess.Popen(argv, stdout=log_file, stderr=log_file))
        for name in argvs:
            while call(url[name] + "/liveness")[0] != 200 and started[-1].poll() is None:
                time.sleep(0.1)
        answers["IPv6: --mesh-host ::1, --mesh-peer-urls [::1]:31527"] = {
            "POST /workers on a": add_url(url["a"], urls[0])["status"],
            "b after POST on a": timeline(url["b"], 20, lambda now: len(now) == 1 and now[0][2]),
        }
        out.mkdir(parents=True, exist_ok=True)
        (out / "mesh-names-answers.json").write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    finally:
        stop_all(started)


if __name__ == "__main__":
    if sys.argv[1] == "mesh-names":
        record_mesh_names(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1] == "mesh-tls":
        record_mesh_tls(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1] == "mesh":
        record_mesh(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1] == "policy":
        record_policy(Path(sys.argv[2]), dict(arg.split("=", 1) for arg in sys.argv[3:]))
    else:
        record(sys.argv[1], Path(sys.argv[2]))
