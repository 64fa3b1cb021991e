"""TLS as real SGLang 0.5.17 serves it, and the simulator against it.

tests/recordings/sglang-0.5.17-h100-tls/ (tests/hardware/tls_serving.py, README.md there) holds two real servers with
ct129's settings: `tls` (--ssl-certfile/--ssl-keyfile, a certificate for 127.0.0.1) and `tls_ca` (the same with
--ssl-ca-certs and a certificate that names only sglang-worker.test). The simulator is started here with each recorded
command line, certificates of the same names made by scripts/test_ca.py in place of the recorded ones, and held to
what the real servers did: the answers over https with the CA, the refusals (a client with the system's CAs only,
plain http to the TLS port), the log lines about TLS, and `tls_ca`'s end: its own warm-up cannot verify 127.0.0.1,
so it never becomes healthy and kills itself (-9) with requests' certificate error.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simulator.simkit import free_port

from .recordings import RECORDINGS, Recording, Workspace, launch_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import test_ca

FOLDER = RECORDINGS / "sglang-0.5.17-h100-tls"
RECORDING = Recording(FOLDER)
SUMMARY = json.loads((FOLDER / "summary.json").read_text())
PROBES = (
    "GET /health (CA)",
    "GET /health_generate (CA)",
    "GET /v1/models (CA)",
    "GET /metrics (CA)",
    "POST /generate (CA)",
    "GET /health (its CA, host name checked)",
    "GET /health (system CAs)",
    "GET /health (plain http)",
)
TLS_LINES = ("SSL enabled: certfile=", "SSL is enabled but --ssl-ca-certs was not provided", "Uvicorn running on https://")


def log(tag: str) -> str:
    return (FOLDER / tag / "server.log").read_text()


def stage(tag: str) -> dict[str, Any]:
    record: dict[str, Any] = SUMMARY["stages"][tag]
    return record


def outcome(status: int | str, error: str | None) -> str:
    """A probe's result as the test compares it: the status, or the error's type."""
    return str(status) if status != "error" else (error or "").split("(", 1)[0]


def probe(url: str, context: ssl.SSLContext, body: Any = None) -> str:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return str(response.status)
    except urllib.error.HTTPError as error:
        return str(error.code)
    except (urllib.error.URLError, OSError) as error:
        return type(getattr(error, "reason", error)).__name__


def client(ca: Path | None, check_hostname: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    context.check_hostname = check_hostname and ca is not None
    return context


def launched(workspace: Workspace, tag: str, certificates: Path, port: int, **env: str) -> subprocess.Popen[str]:
    """The simulator with `tag`'s recorded command line, its certificate files replaced by `certificates`' (same names)."""
    args = launch_args(log(tag))
    names = stage(tag)["certificate_names"]
    test_ca.make(certificates, names)
    files = {"--ssl-certfile": "server.pem", "--ssl-keyfile": "server.key", "--ssl-ca-certs": "ca.pem"}
    args = [str(certificates / files[args[i - 1]]) if i and args[i - 1] in files else word for i, word in enumerate(args)]
    return workspace.launch(workspace.argv(args, "", "", port, RECORDING.listed_model(args)), **env)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, subprocess.Popen[str]]]:
    tmp = tmp_path_factory.mktemp("tls")
    port = free_port()
    proc = launched(Workspace(tmp, RECORDING), "tls", tmp / "certificates", port)
    try:
        yield port, tmp / "certificates", proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_the_recording_is_complete() -> None:
    assert RECORDING.version == "0.5.17"
    assert SUMMARY["stages"]["tls"]["ready"] is True and SUMMARY["stages"]["tls_ca"]["ready"] is False
    assert list(stage("tls")["answers"]) == list(PROBES)
    for tag, ca in (("tls", False), ("tls_ca", True)):
        args = launch_args(log(tag))
        assert "--ssl-certfile" in args and "--ssl-keyfile" in args and ("--ssl-ca-certs" in args) is ca


def test_what_real_sglang_did() -> None:
    """The facts the fleet relies on, as recorded: https answers to a client with the CA, no http on the TLS port,
    and a certificate that does not name 127.0.0.1 kills a server given --ssl-ca-certs (its warm-up checks it)."""
    answers = {name: outcome(status, stage("tls")["errors"].get(name)) for name, status in stage("tls")["answers"].items()}
    assert answers == {
        **dict.fromkeys(PROBES[:6], "200"),
        "GET /health (system CAs)": "SSLCertVerificationError",
        "GET /health (plain http)": "RemoteDisconnected",
    }
    assert stage("tls_ca")["returncode"] == -9
    assert "not valid for '127.0.0.1'" in log("tls_ca")
    assert [step["status"] for step in stage("tls_ca")["health"]["changes"]["/health"]] == ["refused", 503, "refused"]


def test_answers_over_tls_as_recorded(tls_server: tuple[int, Path, subprocess.Popen[str]]) -> None:
    port, certificates, proc = tls_server
    with_ca = client(certificates / "ca.pem")
    # the wait: both health routes answer 200 over https with the CA
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while probe(url + "/health_generate", with_ca) != "200" and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    generate = {"text": "sglang-fleet tls probe:", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    answers = {
        "GET /health (CA)": probe(url + "/health", with_ca),
        "GET /health_generate (CA)": probe(url + "/health_generate", with_ca),
        "GET /v1/models (CA)": probe(url + "/v1/models", with_ca),
        "GET /metrics (CA)": probe(url + "/metrics", with_ca),
        "POST /generate (CA)": probe(url + "/generate", with_ca, generate),
        "GET /health (its CA, host name checked)": probe(url + "/health", client(certificates / "ca.pem", True)),
        "GET /health (system CAs)": probe(url + "/health", client(None)),
        "GET /health (plain http)": probe(f"http://127.0.0.1:{port}/health", with_ca),
    }
    recorded = {name: outcome(status, stage("tls")["errors"].get(name)) for name, status in stage("tls")["answers"].items()}
    assert answers == recorded


def test_tls_lines_of_the_log_as_recorded(tls_server: tuple[int, Path, subprocess.Popen[str]]) -> None:
    port, _, proc = tls_server
    assert probe(f"https://127.0.0.1:{port}/health", client(None, False)) == "SSLCertVerificationError"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)

    def order(text: str) -> list[str]:
        return [marker for line in text.splitlines() for marker in TLS_LINES if marker in line]

    assert order(out) == order(log("tls")) == list(TLS_LINES)


def test_a_certificate_without_the_loopback_address_kills_the_server_given_a_ca(tmp_path: Path) -> None:
    port = free_port()
    # the warm-up's 120 tries, each after the warm-up pause: 0.01 s here (1 s in SGLang, 121 s recorded)
    proc = launched(Workspace(tmp_path, RECORDING), "tls_ca", tmp_path / "certificates", port,
                    SGLANG_SIM_WARMUP_SECONDS="0.01")  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == stage("tls_ca")["returncode"] == -9
    recorded_error = next(line for line in log("tls_ca").splitlines() if "requests.exceptions.SSLError" in line)
    simulated_error = next(line for line in out.splitlines() if "requests.exceptions.SSLError" in line)
    for text in (recorded_error, simulated_error):
        assert f"port={port if text is simulated_error else 30002}): Max retries exceeded with url: /model_info" in text
        assert "certificate verify failed: IP address mismatch, certificate is not valid for '127.0.0.1'" in text
    assert "Initialization failed. warmup error: Traceback" in out and "Initialization failed. warmup error" in log("tls_ca")
