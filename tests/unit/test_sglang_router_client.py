"""module_utils/sglang_router_client against a fake router that answers like smg 1.13.0's /workers API (held to the
recording of the real gateway, tests/recordings/smg-1.13.0, by test_router_fake_contract.py)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import listeners
from ansible_collections.sglang.fleet.plugins.module_utils import sglang_router_client as client
from fleet import ROOT

W1, W2, W3 = "http://127.0.0.1:41001", "http://127.0.0.1:41002", "http://127.0.0.1:41003"


class FakeRouter:
    """The /workers API of the real gateway: additions and removals are accepted (202) and applied later; a removed
    worker is listed as ``draining`` (out of rotation) until its removal shows.

    `add_after` / `remove_after`: how many GET /workers answers go by before a pending change shows (None: never,
    like an addition whose worker never answers). `api_key`: required as a Bearer token, as with --api-key.
    """

    def __init__(self) -> None:
        self.workers: dict[str, dict[str, Any]] = {}  # url -> entry
        self.pending_add: dict[str, list[Any]] = {}  # url -> [id, polls left or None]
        self.pending_remove: dict[str, int] = {}  # url -> polls left
        self.add_after: int | None = 2
        self.remove_after = 1
        self.api_key = ""
        self.calls: list[tuple[str, str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def register(self, url: str, healthy: bool = True) -> str:
        worker_id = str(uuid.uuid4())
        self.workers[url] = {
            "id": worker_id, "url": url, "model_id": "/models/qwen", "priority": 50, "cost": 1.0,
            "worker_type": "regular", "is_healthy": healthy, "status": "ready" if healthy else "not_ready", "load": 0,
            "connection_mode": "http", "runtime_type": "sglang", "max_connection_attempts": 40, "http2": False,
            "labels": {"model_path": "/models/qwen", "tp_size": "1", "dp_size": "1"},
            "models": [{"id": "/models/qwen", "model_type": ["chat", "completions", "responses", "tools"]}],
        }  # fmt: skip
        return worker_id

    def _tick(self) -> None:
        for url, pending in list(self.pending_add.items()):
            if pending[1] is not None:
                pending[1] -= 1
                if pending[1] <= 0:
                    del self.pending_add[url]
                    self.register(url)
                    self.workers[url]["id"] = pending[0]
        for url in list(self.pending_remove):
            self.pending_remove[url] -= 1
            if self.pending_remove[url] <= 0:
                del self.pending_remove[url]
                self.workers.pop(url, None)

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any]:
        payload = json.loads(body) if body else None
        self.calls.append((method, path, payload))
        if self.api_key and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, ""
        if path == "/workers" and method == "GET":
            self._tick()
            listed = list(self.workers.values())
            return 200, {
                "workers": listed,
                "total": len(listed),
                "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": len(listed)},
            }
        if path == "/workers" and method == "POST":
            if headers.get("Content-Type") != "application/json":
                return 415, "Expected request with `Content-Type: application/json`"
            if not isinstance(payload, dict) or "url" not in payload:
                return 422, "Failed to deserialize the JSON body into the target type: missing field `url` at line 1 column 2"
            url = payload["url"]
            if url in self.pending_add:  # smg 1.13.0's answer, as CI's sandbox run met it (the recording has it too)
                in_progress = self.pending_add[url][0]
                return 409, {"error": f"Worker creation already in progress for URL '{url}' with ID {in_progress}. "
                             f"Poll GET /workers/{in_progress}.", "code": "WORKER_CREATE_IN_PROGRESS"}  # fmt: skip
            worker_id = self.workers[url]["id"] if url in self.workers else str(uuid.uuid4())
            if url not in self.workers:
                self.pending_add[url] = [worker_id, self.add_after]
            return 202, {"status": "accepted", "worker_id": worker_id, "url": url, "location": f"/workers/{worker_id}",
                         "message": "Worker addition queued for background processing"}  # fmt: skip
        if path.startswith("/workers/"):
            raw = path[len("/workers/") :]
            try:
                uuid.UUID(raw)
            except ValueError:
                return 400, {"error": f"Invalid worker_id '{raw}' (expected UUID). Error: invalid length", "code": "BAD_REQUEST"}
            url = next((u for u, w in self.workers.items() if w["id"] == raw), None)
            pending = next((u for u, p in self.pending_add.items() if p[0] == raw), None)
            if method == "DELETE" and url is not None:
                self.pending_remove[url] = self.remove_after
                self.workers[url].update(status="draining", is_healthy=False)
                return 202, {"status": "accepted", "worker_id": raw, "message": "Worker removal queued for background processing"}
            if method == "GET" and url is not None:
                return 200, self.workers[url]
            if method == "GET" and pending is not None:
                job = {
                    "job_type": "AddWorker",
                    "worker_url": pending,
                    "status": "processing",
                    "message": None,
                    "timestamp": 1796003279,
                }
                return 200, {"id": raw, "url": pending, "is_healthy": False, "worker_type": "unknown", "job_status": job}
            return 404, {"error": f"Worker {raw} not found", "code": "WORKER_NOT_FOUND"}
        return 404, ""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        router = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = router.answer(self.command, self.path, self.headers, body)
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def served(fake: FakeRouter) -> Iterator[FakeRouter]:
    """The fake answering in a thread of its own while the test runs, shut down after it (the fixtures' body)."""
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    yield from served(FakeRouter())


def methods(router: FakeRouter) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _ in router.calls if (method, path) != ("GET", "/workers")]


def test_lists_workers_and_healthy_urls(router: FakeRouter) -> None:
    router.register(W2)
    router.register(W1)
    router.register(W3, healthy=False)
    assert [w["url"] for w in client.list_workers(router.url)] == [W2, W1, W3]
    assert client.healthy_worker_urls(router.url) == [W1, W2]


def test_find_worker_ignores_a_trailing_slash(router: FakeRouter) -> None:
    worker_id = router.register(W1)
    found = client.find_worker(router.url, W1 + "/")
    assert found is not None and found["id"] == worker_id
    assert client.find_worker(router.url, W2) is None


def test_scheme_less_urls_are_refused(router: FakeRouter) -> None:
    with pytest.raises(ValueError, match="http://"):
        client.find_worker(router.url, "127.0.0.1:41001")


def test_add_posts_and_waits_until_listed_healthy(router: FakeRouter) -> None:
    router.add_after = 3
    assert client.add_worker(router.url, W1 + "/", timeout=10, interval=0.01) is True
    assert client.healthy_worker_urls(router.url) == [W1]
    assert [c for c in router.calls if c[0] == "POST"] == [("POST", "/workers", {"url": W1})]


def test_add_waits_for_an_addition_already_in_progress(router: FakeRouter) -> None:
    router.add_after = 4
    router.pending_add[W1] = [str(uuid.uuid4()), 4]  # the router's launcher posted it at start
    assert client.add_worker(router.url, W1, timeout=10, interval=0.01) is True
    assert client.healthy_worker_urls(router.url) == [W1]
    assert [c[0] for c in router.calls if c[0] == "POST"] == ["POST"]


def test_an_addition_in_progress_that_never_completes_times_out_with_its_job(router: FakeRouter) -> None:
    router.pending_add[W1] = [str(uuid.uuid4()), None]
    with pytest.raises(client.WaitTimeout, match=r"as healthy.*job AddWorker processing"):
        client.add_worker(router.url, W1, timeout=0.3, interval=0.05)


def test_add_passes_the_workers_api_key(router: FakeRouter) -> None:
    client.add_worker(router.url, W1, timeout=10, interval=0.01, worker_api_key="worker-secret")
    assert [c[2] for c in router.calls if c[0] == "POST"] == [{"url": W1, "api_key": "worker-secret"}]


def test_add_of_a_healthy_worker_changes_nothing(router: FakeRouter) -> None:
    router.register(W1)
    assert client.add_worker(router.url, W1, timeout=10, interval=0.01) is False
    assert methods(router) == []


def test_add_registers_an_unhealthy_worker_again(router: FakeRouter) -> None:
    old_id = router.register(W1, healthy=False)
    assert client.add_worker(router.url, W1, timeout=10, interval=0.01) is True
    assert methods(router) == [("DELETE", f"/workers/{old_id}"), ("POST", "/workers")]
    found = client.find_worker(router.url, W1)
    assert found is not None and found["is_healthy"] is True and found["id"] != old_id


def test_add_with_replace_registers_a_healthy_worker_again(router: FakeRouter) -> None:
    old_id = router.register(W1)
    assert client.add_worker(router.url, W1, timeout=10, interval=0.01, replace=True) is True
    assert methods(router) == [("DELETE", f"/workers/{old_id}"), ("POST", "/workers")]


def test_add_times_out_with_the_routers_job_status(router: FakeRouter) -> None:
    router.add_after = None  # the worker never answers its /health
    with pytest.raises(client.WaitTimeout, match=r"not list http://127\.0\.0\.1:41001 as healthy.*job AddWorker processing"):
        client.add_worker(router.url, W1, timeout=0.3, interval=0.05)


def test_remove_deletes_by_id_and_waits_until_unlisted(router: FakeRouter) -> None:
    worker_id = router.register(W1)
    router.register(W2)
    router.remove_after = 3
    assert client.remove_worker(router.url, W1, timeout=10, interval=0.01) is True
    assert ("DELETE", f"/workers/{worker_id}") in methods(router)
    assert [w["url"] for w in client.list_workers(router.url)] == [W2]


def test_remove_of_an_unlisted_worker_changes_nothing(router: FakeRouter) -> None:
    router.register(W2)
    assert client.remove_worker(router.url, W1, timeout=10, interval=0.01) is False
    assert methods(router) == []


def test_remove_times_out_when_the_worker_stays_listed(router: FakeRouter) -> None:
    router.register(W1)
    router.remove_after = 10**6
    with pytest.raises(client.WaitTimeout, match="still lists"):
        client.remove_worker(router.url, W1, timeout=0.3, interval=0.05)


def test_api_key_is_sent_as_bearer_token(router: FakeRouter) -> None:
    router.api_key = "router-secret"
    router.register(W1)
    with pytest.raises(client.RouterError) as refused:
        client.list_workers(router.url)
    assert refused.value.status == 401
    assert client.healthy_worker_urls(router.url, api_key="router-secret") == [W1]
    assert client.remove_worker(router.url, W1, timeout=10, api_key="router-secret", interval=0.01) is True


def test_unexpected_answers_raise_router_error(router: FakeRouter) -> None:
    with pytest.raises(client.RouterError, match="HTTP 404"):
        client.list_workers(router.url + "/nowhere")


def test_a_router_that_does_not_answer_raises_router_error(router: FakeRouter) -> None:
    url = router.url
    router.server.shutdown()
    router.server.server_close()
    with pytest.raises(client.RouterError, match="no answer") as error:
        client.list_workers(url, timeout=2)
    assert error.value.status is None


# -- smg 1.13.0's answer to a POST of a URL whose addition is in progress, as recorded (simulator/tools/record_smg.py) --

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "recordings" / "smg-1.13.0" / "answers.json").read_text())


def _replaying_the_recorded_409(router: FakeRouter) -> tuple[str, str]:
    """`router` answers POST /workers with the recorded 409 of smg 1.13.0 while the recorded addition (its URL and
    id) is in progress, as the router's launcher leaves it at start: (that URL, that id)."""
    recorded = RECORDED["POST /workers (addition in progress)"]["second"]
    first = RECORDED["POST /workers (addition in progress)"]["first"]["body"]
    assert recorded["status"] == 409 and recorded["body"]["code"] == "WORKER_CREATE_IN_PROGRESS"
    url, worker_id = first["url"], first["worker_id"]
    assert url in recorded["body"]["error"] and worker_id in recorded["body"]["error"]
    answer = router.answer

    def replay(method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any]:
        if (method, path) == ("POST", "/workers") and url in router.pending_add:
            router.calls.append((method, path, json.loads(body)))
            return recorded["status"], recorded["body"]
        return answer(method, path, headers, body)

    router.answer = replay  # type: ignore[method-assign]
    return url, worker_id


def test_add_waits_for_the_recorded_addition_in_progress(router: FakeRouter) -> None:
    url, worker_id = _replaying_the_recorded_409(router)
    router.pending_add[url] = [worker_id, 4]  # listed healthy at the 4th GET /workers
    assert client.add_worker(router.url, url, timeout=10, interval=0.01) is True
    assert client.healthy_worker_urls(router.url) == [url]
    assert [c for c in router.calls if c[0] == "POST"] == [("POST", "/workers", {"url": url})]
    assert len([c for c in router.calls if c[:2] == ("GET", "/workers")]) >= 4


def test_the_recorded_addition_in_progress_that_never_completes_times_out_naming_its_job(router: FakeRouter) -> None:
    url, worker_id = _replaying_the_recorded_409(router)
    router.pending_add[url] = [worker_id, None]
    with pytest.raises(client.WaitTimeout, match=r"as healthy.*job AddWorker processing"):
        client.add_worker(router.url, url, timeout=0.3, interval=0.05)
    assert ("GET", f"/workers/{worker_id}", None) in router.calls


# A fleet gateway beyond loopback serves https with the fleet's CA (issue 38, finding 8): smg 1.13.0's
# --tls-cert-path/--tls-key-path, recorded in tests/recordings/smg-1.13.0-tls (with the CA: 200; without it:
# CERTIFICATE_VERIFY_FAILED). The fake router serves TLS with a throw-away CA of scripts/test_ca.py.


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    subprocess.run([sys.executable, str(ROOT / "scripts/test_ca.py"), str(directory), "127.0.0.1", "localhost"], check=True)
    return directory


@pytest.fixture
def tls_router(test_ca: Path) -> Iterator[FakeRouter]:
    fake = FakeRouter()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(test_ca / "server.pem", test_ca / "server.key")
    fake.server.socket = context.wrap_socket(fake.server.socket, server_side=True)
    fake.url = fake.url.replace("http://", "https://")
    yield from served(fake)


def test_a_tls_gateway_is_managed_with_the_fleets_ca_and_refused_without_it(tls_router: FakeRouter, test_ca: Path) -> None:
    tls_router.api_key = "sk-admin"
    with pytest.raises(client.RouterError) as refused:
        client.list_workers(tls_router.url, api_key="sk-admin")
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert tls_router.calls == [], "a request reached a gateway the client could not verify"
    assert client.add_worker(tls_router.url, W1, api_key="sk-admin", interval=0, ca_file=str(test_ca / "ca.pem"))
    assert client.remove_worker(tls_router.url, W1, api_key="sk-admin", interval=0, ca_file=str(test_ca / "ca.pem"))
    answer = client.routers_differences(
        [{"url": tls_router.url, "workers": [W2], "api_key": "sk-admin", "ca_file": str(test_ca / "ca.pem")}]
    )
    assert answer == {tls_router.url: "to register ['http://127.0.0.1:41002'], to remove []"}


def test_no_key_goes_to_another_hosts_gateway_over_plain_http(router: FakeRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout on one host drains its instances from the gateway on another with the gateway's admin key: over plain
    http that key would cross the network in the clear. Refused before anything is sent, naming the variables."""
    monkeypatch.setattr(listeners, "is_local", lambda host: False)  # the fake router stands in for another host's
    with pytest.raises(listeners.ListenerError) as refused:
        client.list_workers(router.url, api_key="sk-admin")
    assert f"{router.url}/workers is another host's, over plain HTTP: no key was sent" in str(refused.value)
    assert "sglang_gateway_tls_cert and sglang_gateway_tls_key on the gateway's host" in str(refused.value)
    assert router.calls == []


def test_an_instance_over_https_is_probed_with_its_ca_and_refused_without_it(tls_router: FakeRouter, test_ca: Path) -> None:
    """Remote workers over TLS (sglang_server_tls_cert): the rollout's readiness wait and reads, status and the router's
    reconcile verify an instance against its CA (sglang_server_tls_ca) and get nothing from one they cannot verify.
    The fake's GET /workers stands in for an instance's keyless path."""
    from ansible_collections.sglang.fleet.plugins.module_utils.sglang_readiness import http_json, http_status
    from ansible_collections.sglang.fleet.plugins.modules.sglang_router_members import worker_ready

    ca = str(test_ca / "ca.pem")
    url = f"{tls_router.url}/workers"
    assert http_status(url, timeout=5, ca_file=ca) == 200
    assert http_status(url, timeout=5, ca_data=(test_ca / "ca.pem").read_text()) == 200
    assert http_json(url, timeout=5, ca_file=ca)["workers"] == []
    assert worker_ready(tls_router.url, "/workers", ca_file=ca) is None
    answered = len(tls_router.calls)
    assert http_status(url, timeout=5) is None, "not verified: no answer taken"
    assert "CERTIFICATE_VERIFY_FAILED" in str(worker_ready(tls_router.url, "/workers"))
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        http_json(url, timeout=5)
    assert len(tls_router.calls) == answered, "a request reached an instance the client could not verify"
