"""The load client of the benches and integration tests (tests/integration/load_client.py), with two gateway URLs: a
client that retries on the other gateway loses no request while one stops (issue 39); with one URL it does."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).resolve().parents[1] / "integration/load_client.py"


class Gateway(BaseHTTPRequestHandler):
    """Answers /generate as SGLang does through a gateway (one token), and /workers with one healthy worker."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer({"text": "hi", "meta_info": {"completion_tokens": 1}})

    def do_GET(self) -> None:
        self.answer({"workers": [{"url": "http://127.0.0.1:1", "is_healthy": True}]})

    def answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def load(urls: list[str], stopped: ThreadingHTTPServer, tmp_path: Path) -> dict[str, Any]:
    """3 s of load from 4 clients over `urls`; `stopped` stops (closes its port) after 1 s."""
    stop_file = tmp_path / "stop-load"
    client = subprocess.Popen(
        [sys.executable, "-", ",".join(urls), "3", "4", str(tmp_path / "no-keys.json")],
        stdin=CLIENT.open("rb"),
        stdout=subprocess.PIPE,
        text=True,
        env={"LOAD_CLIENT_STOP_FILE": str(stop_file), "PATH": "/usr/bin:/bin"},
    )
    time.sleep(1)
    stopped.shutdown()
    stopped.server_close()
    output, _ = client.communicate(timeout=60)
    report: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return report


def test_a_client_that_retries_on_the_other_gateway_loses_no_request(tmp_path: Path) -> None:
    first, second = serve(), serve()
    urls = [f"http://127.0.0.1:{server.server_address[1]}" for server in (first, second)]
    try:
        report = load(urls, first, tmp_path)
    finally:
        second.shutdown()
    assert report["requests"] > 20 and report["failed"] == 0, report
    assert report["retried"] > 0 and report["failed_by_router"][urls[0]] > 0, "the stopped gateway's requests went on"
    assert report["failed_by_router"][urls[1]] == 0 and report["most_in_rotation"] == 1
    assert report["failed_from"] is None and report["failed_until"] is None and report["error_counts"] == {}


def test_a_client_of_one_gateway_fails_while_it_is_stopped(tmp_path: Path) -> None:
    only = serve()
    before = time.time()
    report = load([f"http://127.0.0.1:{only.server_address[1]}"], only, tmp_path)
    assert report["failed"] > 0 and report["retried"] == 0 and "failed_by_router" not in report
    # Refused once its port is closed (a request in flight then may be reset).
    assert any("Connection refused" in error for error in report["errors"]), report["errors"]
    # The failures' window: from the stop (1 s in) to the end of the load (3 s in).
    assert before + 0.9 < report["failed_from"] < report["failed_until"] - 1 < time.time(), report
    assert sum(report["error_counts"].values()) == report["failed"], report
