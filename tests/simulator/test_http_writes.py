"""The simulator's HTTP server answers as uvicorn does on the wire: TCP_NODELAY on every accepted
connection and each answer (status line, headers, body) in one write, so a kept-alive connection
never waits on Nagle's algorithm and the client's delayed ACK. Measures nothing:
tests/bench/bench_latency.py prints the latencies."""

from __future__ import annotations

import io
import logging
import socket
import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

from sglang_simulator.server import Status, make_server


class RecordingRaw(io.RawIOBase):
    """The socket's side of the handler's write file: each write that would be one send."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sends.append(bytes(data))
        return len(data)


class FakeConnection:
    def __init__(self, requests: bytes) -> None:
        self.requests = requests
        self.options: dict[tuple[int, int], int] = {}
        self.raw = RecordingRaw()

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options[(level, option)] = value

    def settimeout(self, timeout: float | None) -> None:
        pass

    def makefile(self, mode: str, buffering: int = -1) -> Any:
        if mode == "rb":
            return io.BufferedReader(io.BytesIO(self.requests))
        return io.BufferedWriter(self.raw, buffering) if buffering else self.raw


def app(status: Status = Status.STARTING) -> Any:
    return SimpleNamespace(
        settings={},
        version="0.5.23",
        status=status,
        gracefully_exit=False,
        lock=threading.Lock(),
        http_requests=Counter(),
        http_responses=Counter(),
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
    )


def serve(requests: bytes) -> FakeConnection:
    server = make_server(app(), "127.0.0.1", 0)
    try:
        connection = FakeConnection(requests)
        server.RequestHandlerClass(connection, ("127.0.0.1", 40000), server)
        return connection
    finally:
        server.server_close()


def test_every_accepted_connection_gets_tcp_nodelay() -> None:
    connection = serve(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert connection.options == {(socket.IPPROTO_TCP, socket.TCP_NODELAY): True}


def test_each_answer_on_a_kept_alive_connection_is_one_write() -> None:
    """Two requests on one connection (404 with a JSON body, then 503): two sends, each a whole answer."""
    connection = serve(
        b"GET /no-such-route HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    sends = connection.raw.sends
    assert len(sends) == 2, sends
    head, body = sends[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 404 ") and body == b'{"detail":"Not Found"}'
    assert sends[1].startswith(b"HTTP/1.1 503 ") and sends[1].endswith(b"Content-Length: 0\r\n\r\n")


def test_a_live_servers_accepted_socket_has_tcp_nodelay() -> None:
    """On a real socket: the option as the accepted connection carries it."""
    seen: list[int] = []
    server = make_server(app(), "127.0.0.1", 0)
    handler = server.RequestHandlerClass

    class Recording(handler):  # type: ignore[valid-type, misc]
        def setup(self) -> None:
            super().setup()
            seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server.RequestHandlerClass = Recording
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as client:
            client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 503 ")
    finally:
        thread.join(10)
        server.server_close()
    assert seen == [1]
