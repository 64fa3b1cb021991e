"""tests/mirror.py CountingProxy, which make bench's model figures rest on: it relays the mirror's answers unchanged
(its redirects rewritten to stay behind the proxy) and counts the bytes it sent."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mirror import CountingProxy

BODY = bytes(range(256)) * 1000


@pytest.fixture
def upstream() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", f"{address[0]}/file")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

    address: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    address.append(f"http://127.0.0.1:{server.server_port}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield address[0]
    server.shutdown()
    server.server_close()


def test_it_relays_and_counts_what_the_mirror_sent(upstream: str) -> None:
    proxy = CountingProxy(upstream)
    try:
        with urllib.request.urlopen(f"{proxy.endpoint}/moved", timeout=10) as answer:  # follows the redirect
            assert answer.read() == BODY
            assert answer.url == f"{proxy.endpoint}/file", "the redirect stays behind the proxy"
        assert proxy.traffic.requests == {"/moved": 1, "/file": 1}
        assert proxy.traffic.body_bytes == len(BODY)
        assert len(BODY) < proxy.traffic.bytes_sent < len(BODY) + 400
        proxy.traffic.reset()
        assert (proxy.traffic.bytes_sent, proxy.traffic.body_bytes, proxy.traffic.requests) == (0, 0, {})
    finally:
        proxy.close()
