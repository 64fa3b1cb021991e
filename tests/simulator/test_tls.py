"""The simulator over TLS, as SGLang 0.5.17 and 0.5.23 serve with --ssl-certfile/--ssl-keyfile (issue 38).

What it imitates is from source, not from a running server (no GPU was lent): the flags are the wheels' own
(sglang_simulator/data/sglang-*.json), their validation is recorded in tests/recordings/smg-1.13.0-tls/
(sglang-0.5.23-serving-hook-ssl.py.txt; 0.5.17's server_args.py ``_handle_ssl_validation`` says the same), and
SGLang hands the files to uvicorn.run (uvicorn 0.54.0, the constraints' pin: no client certificate asked).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from .simkit import Server, run_sim

Start = Callable[..., Server]
ROOT = Path(__file__).resolve().parents[2]
NO_EFFECT = "has no effect without --ssl-certfile and --ssl-keyfile."
RECORDED = ROOT / "tests/recordings/smg-1.13.0-tls/sglang-0.5.23-serving-hook-ssl.py.txt"


@pytest.fixture
def test_ca(tmp_path: Path) -> Path:
    """A throw-away CA and a certificate for 127.0.0.1, made now (scripts/test_ca.py, as the sandbox's)."""
    directory = tmp_path / "tls"
    script = str(ROOT / "scripts/test_ca.py")
    subprocess.run([sys.executable, script, str(directory), "127.0.0.1"], check=True)
    return directory


def get(url: str, context: ssl.SSLContext | None = None) -> int:
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        return int(response.status)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_a_server_with_a_certificate_serves_https_only(
    start_server: Start, model_dir: Path, test_ca: Path, version: str
) -> None:
    tls = ["--ssl-certfile", str(test_ca / "server.pem"), "--ssl-keyfile", str(test_ca / "server.key")]
    server = start_server(["--model-path", str(model_dir), *tls], SGLANG_SIM_VERSION=version)
    server.wait_listening()
    https = f"https://127.0.0.1:{server.port}/health"
    trusted = ssl.create_default_context(cafile=str(test_ca / "ca.pem"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if get(https, trusted) == 200:
                break
        except urllib.error.HTTPError:  # 503 while it warms up
            time.sleep(0.05)
    assert get(https, trusted) == 200
    # The system's CAs do not know the certificate.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(https)
    # Plain http on the serving port gets no HTTP answer: the connection is closed (or reset).
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:
        plain.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            answer = plain.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/"), answer
    assert get(https, trusted) == 200, "the server still serves https after a plain-http client"
    log = server.stop()
    assert f"SSL enabled: certfile={test_ca / 'server.pem'}, keyfile={test_ca / 'server.key'}" in log
    assert f"Uvicorn running on https://127.0.0.1:{server.port}" in log


def test_a_server_without_a_certificate_stays_plain_http(start_server: Start, model_dir: Path) -> None:
    server = start_server(["--model-path", str(model_dir)])
    server.wait_ready()
    assert f"Uvicorn running on http://127.0.0.1:{server.port}" in server.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ssl-keyfile", "{key}"], "--ssl-keyfile requires --ssl-certfile to be specified as well."),
        (["--ssl-certfile", "{cert}"], "--ssl-certfile requires --ssl-keyfile to be specified as well."),
        (["--ssl-ca-certs", "{ca}"], "--ssl-ca-certs " + NO_EFFECT),
        (["--ssl-keyfile-password", "pw"], "--ssl-keyfile-password " + NO_EFFECT),
        (["--ssl-certfile", "{cert}", "--ssl-keyfile", "/nonexistent.key"],
         "SSL key file not found: '/nonexistent.key'. Please check the --ssl-keyfile path."),
    ],
)  # fmt: skip
def test_ssl_flags_are_validated_as_sglang_does_before_the_model_loads(
    sim_env: object, model_dir: Path, test_ca: Path, flags: list[str], message: str
) -> None:
    files = {"key": test_ca / "server.key", "cert": test_ca / "server.pem", "ca": test_ca / "ca.pem"}
    args = ["--model-path", str(model_dir), *(flag.format(**files) for flag in flags)]
    result = run_sim("sglang_simulator", args, sim_env.environ())  # type: ignore[attr-defined]
    assert result.returncode != 0
    assert f"ValueError: {message}" in result.stderr
    # The message is the recorded source's, word for word (a file's path is its f-string's field there).
    recorded = RECORDED.read_text()
    expected = message.replace("'/nonexistent.key'", "'{cfg.ssl_keyfile}'")
    assert all(part in recorded for part in expected.split(". ")), expected
