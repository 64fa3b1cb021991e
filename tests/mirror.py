"""The test mirror for tests of the model download: olah, a Hugging Face-compatible server, serving the generated
model repository (tests/fixtures/model_repo.py) offline on 127.0.0.1, as scripts/model-mirror.sh starts it.

Plain functions; a test module wraps start_mirror() in a session fixture of its own.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/model-mirror.sh"
# The first start creates .mirror-venv/ (about a minute) and may install git-lfs.
START_TIMEOUT_S = 600


@dataclass(frozen=True)
class Mirror:
    """Where the mirror answers and what it serves: the repository id and its commits, oldest first (the first is
    tagged v1; the second changes one shard)."""

    endpoint: str
    repo: str
    commits: tuple[str, ...]


def parse(output: str) -> Mirror:
    """The script's KEY=value lines (MODEL_MIRROR_ENDPOINT, MODEL_MIRROR_REPO, MODEL_MIRROR_COMMITS) as a Mirror."""
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("MODEL_MIRROR_"):
            values[key] = " ".join(shlex.split(value))
    missing = {"MODEL_MIRROR_ENDPOINT", "MODEL_MIRROR_REPO", "MODEL_MIRROR_COMMITS"} - values.keys()
    if missing:
        raise ValueError(f"{SCRIPT.name} did not print {', '.join(sorted(missing))}:\n{output}")
    return Mirror(values["MODEL_MIRROR_ENDPOINT"], values["MODEL_MIRROR_REPO"], tuple(values["MODEL_MIRROR_COMMITS"].split()))


def _run(action: str, timeout: float) -> str:
    done = subprocess.run([str(SCRIPT), action], capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} {action} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def start_mirror() -> Mirror:
    """Start the mirror (or find it running) and say where it answers. The port: MODEL_MIRROR_PORT (18090)."""
    return parse(_run("start", START_TIMEOUT_S))


def stop_mirror() -> None:
    _run("stop", 60)


# Hop-by-hop headers a proxy does not pass on (RFC 9110 7.6.1), and Transfer-Encoding: the proxy answers with the
# whole body and its Content-Length.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}


@dataclass
class Traffic:
    """What the mirror sent through the counting proxy: the bytes of every answer as written to the client (status
    line, headers, body) and the requests, by path."""

    bytes_sent: int = 0
    body_bytes: int = 0
    requests: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.bytes_sent, self.body_bytes, self.requests = 0, 0, {}


class CountingProxy:
    """A reverse proxy on 127.0.0.1 in front of the mirror that counts what the mirror sends, measured outside the
    product (its own counters say what it believes it fetched). The mirror's redirects name its own address; the
    proxy rewrites them to its own, so a client that starts at the proxy stays behind it."""

    def __init__(self, upstream: str) -> None:
        import http.client
        import threading
        import urllib.parse
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        target = urllib.parse.urlsplit(upstream)
        self.traffic = Traffic()
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"host"}}
                upstream_connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=120)
                try:
                    upstream_connection.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream_connection.getresponse()
                    data = answer.read()
                    head = [f"{self.protocol_version} {answer.status} {answer.reason}\r\n".encode()]
                    for key, value in answer.getheaders():
                        if key.lower() in _HOP_BY_HOP | {"content-length"}:
                            continue
                        if key.lower() == "location":
                            value = value.replace(target.netloc, proxy.netloc)
                        head.append(f"{key}: {value}\r\n".encode("latin-1"))
                    sent = b"" if self.command == "HEAD" else data
                    length_header = answer.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                    if length_header is not None:
                        head.append(f"Content-Length: {length_header}\r\n".encode())
                    message = b"".join(head) + b"\r\n" + sent
                finally:
                    upstream_connection.close()
                with lock:  # counted before it is sent: a client that has the answer finds it counted
                    proxy.traffic.bytes_sent += len(message)
                    proxy.traffic.body_bytes += len(sent)
                    path = self.path.split("?", 1)[0]
                    proxy.traffic.requests[path] = proxy.traffic.requests.get(path, 0) + 1
                self.wfile.write(message)

            do_GET = do_HEAD = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.netloc = f"127.0.0.1:{self.server.server_address[1]}"
        self.endpoint = f"http://{self.netloc}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="counting-proxy", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
