"""sglang_router_members: the router's workers are brought back to the planned ones (fake router on loopback)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_member_reads
from ansible_collections.sglang.fleet.plugins.module_utils import sglang_router_client
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_router_client import RouterError
from ansible_collections.sglang.fleet.plugins.modules import sglang_router_members as module
from test_sglang_router_client import W1, W2, W3, FakeRouter


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    fake = FakeRouter()
    fake.add_after = 1
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join(timeout=5)


class FakeWorker:
    """A worker's /health_generate: `status` is what it answers; `seen` the Authorization headers it got."""

    def __init__(self) -> None:
        self.status = 200
        self.seen: list[str | None] = []
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                worker.seen.append(self.headers.get("Authorization"))
                self.send_response(worker.status if self.path == "/health_generate" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def worker() -> Iterator[FakeWorker]:
    fake = FakeWorker()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join(timeout=5)


def ready(url: str) -> str | None:
    return None


def changes(router: FakeRouter) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _ in router.calls if method != "GET"]


def test_a_planned_worker_the_router_lost_is_added_back(router: FakeRouter) -> None:
    router.register(W1)
    result = module.reconcile(router.url, [W1, W2 + "/"], ready=ready, timeout=10)
    assert result == {"changed": True, "added": [W2], "removed": [], "skipped": []}
    assert sorted(w["url"] for w in router.workers.values() if w["is_healthy"]) == [W1, W2]
    assert changes(router) == [("POST", "/workers")]


def test_a_worker_the_plan_no_longer_has_is_removed(router: FakeRouter) -> None:
    router.register(W1)
    gone = router.register(W3)
    result = module.reconcile(router.url, [W1], ready=ready, timeout=10)
    assert result == {"changed": True, "added": [], "removed": [W3], "skipped": []}
    assert list(router.workers) == [W1]
    assert changes(router) == [("DELETE", f"/workers/{gone}")]


def test_a_gateway_keeps_the_workers_of_hosts_outside_the_run_and_drops_any_other_unplanned_one(router: FakeRouter) -> None:
    """A run limited to some hosts leaves the others' workers; a host dropped from the inventory, or a worker
    registered under an address that changed, is removed."""
    router.register(W1)
    router.register("http://b200:30001")
    gone = router.register("http://old-name:30002")
    result = module.reconcile(router.url, [W1], ready=ready, timeout=10, keep_hosts=["b200"])
    assert result["removed"] == ["http://old-name:30002"]
    assert changes(router) == [("DELETE", f"/workers/{gone}")]
    assert sorted(router.workers) == [W1, "http://b200:30001"]


def test_a_worker_registered_with_another_model_is_registered_again_with_its_own() -> None:
    """The gateway's multi-model mode routes by the model a worker was registered with."""
    listed = [
        {"url": W1, "is_healthy": True, "model_id": "tiny-qwen3.5"},
        {"url": W2, "is_healthy": True, "model_id": "coder"},
    ]
    changes = sglang_router_client.plan_changes(listed, [W1, W2], ready, models={W1: "tiny-qwen3.5", W2: "tiny-qwen3.5"})
    assert changes == {"add": [W2], "remove": [], "skipped": []}
    assert sglang_router_client.plan_changes(listed, [W1, W2], ready)["add"] == [], "no model planned: none compared"


def test_the_gateways_registry_is_kept_in_its_workers_file_which_changes_only_with_it(router: FakeRouter, tmp_path: Path) -> None:
    kept = tmp_path / "gateway-workers.json"
    router.register("http://b200:30001")
    first = module.reconcile(router.url, [W1], ready=ready, timeout=10, keep_hosts=["b200"], workers_file=str(kept))
    assert first["changed"] and first["workers_file_changed"]
    assert [worker["url"] for worker in json.loads(kept.read_text())["workers"]] == [
        "http://127.0.0.1:41001",
        "http://b200:30001",
    ]
    again = module.reconcile(router.url, [W1], ready=ready, timeout=10, keep_hosts=["b200"], workers_file=str(kept))
    assert not again["changed"] and not again["workers_file_changed"]
    assert oct(kept.stat().st_mode & 0o777) == "0o644"
    # A workers file that is no text (the probe calls it different) is written again.
    kept.write_bytes(b"\xff\xfe not text")
    repaired = module.reconcile(router.url, [W1], ready=ready, timeout=10, keep_hosts=["b200"], workers_file=str(kept))
    assert repaired["workers_file_changed"] and json.loads(kept.read_text())["workers"]


def test_nothing_changes_when_the_router_has_the_planned_workers(router: FakeRouter) -> None:
    router.register(W2)
    router.register(W1)
    result = module.reconcile(router.url, [W1, W2], ready=lambda url: pytest.fail("no probe needed"), timeout=10)
    assert result == {"changed": False, "added": [], "removed": [], "skipped": []}
    assert changes(router) == []


def test_check_mode_reports_the_difference_and_changes_nothing(router: FakeRouter) -> None:
    router.register(W1)
    router.register(W3)
    result = module.reconcile(router.url, [W1, W2], ready=ready, check_mode=True)
    assert result == {"changed": True, "added": [W2], "removed": [W3], "skipped": []}
    assert changes(router) == []
    assert sorted(router.workers) == [W1, W3]


def test_a_planned_worker_that_is_not_ready_is_left_out(router: FakeRouter) -> None:
    router.register(W1)
    result = module.reconcile(router.url, [W1, W2], ready=lambda url: "/health_generate: HTTP 503", timeout=10)
    assert result["changed"] is False and result["added"] == []
    assert result["skipped"] == [
        {"url": W2, "reason": "not listed by the router, and not ready itself (/health_generate: HTTP 503)"}
    ]
    assert changes(router) == []


def test_a_worker_listed_as_unhealthy_but_ready_is_registered_again(router: FakeRouter) -> None:
    old = router.register(W1, healthy=False)
    result = module.reconcile(router.url, [W1], ready=ready, timeout=10)
    assert result["changed"] is True and result["added"] == [W1]
    assert changes(router) == [("DELETE", f"/workers/{old}"), ("POST", "/workers")]
    assert router.workers[W1]["is_healthy"] is True


def test_the_routers_key_and_the_workers_key(router: FakeRouter, worker: FakeWorker) -> None:
    router.api_key = "admin-secret"
    result = module.reconcile(router.url, [worker.url], api_key="admin-secret", worker_api_key="worker-secret", timeout=10)
    assert result["added"] == [worker.url]
    assert worker.seen == ["Bearer worker-secret"], "the readiness probe carries the workers' key"
    assert [c[2] for c in router.calls if c[0] == "POST"] == [{"url": worker.url, "api_key": "worker-secret"}]
    with pytest.raises(RouterError, match="HTTP 401"):
        module.reconcile(router.url, [worker.url], api_key="wrong")


def test_worker_readiness_probe(worker: FakeWorker) -> None:
    assert module.worker_ready(worker.url, "/health_generate") is None
    worker.status = 503
    assert module.worker_ready(worker.url, "/health_generate") == "/health_generate: HTTP 503"
    worker.server.server_close()
    closed = module.worker_ready(worker.url, "/health_generate", timeout=2)
    assert closed is not None and closed.startswith("/health_generate: no answer")


def run_main(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_module_reports_changed_only_when_it_changed_something(
    router: FakeRouter, worker: FakeWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_main(capsys, router_url=router.url, workers=[worker.url], timeout=10)
    assert first["changed"] is True and first["added"] == [worker.url]
    again = run_main(capsys, router_url=router.url, workers=[worker.url], timeout=10)
    assert again["changed"] is False and again["added"] == []


def test_module_in_check_mode_without_a_running_router_changes_nothing(
    router: FakeRouter, capsys: pytest.CaptureFixture[str]
) -> None:
    url = router.url
    router.server.shutdown()
    router.server.server_close()
    checked = run_main(capsys, router_url=url, workers=[W1], _ansible_check_mode=True)
    assert checked["changed"] is False and "no answer" in checked["msg"]
    failed = run_main(capsys, router_url=url, workers=[W1])
    assert failed["failed"] is True and "no answer" in failed["msg"]


def test_module_in_check_mode_with_a_router_that_refuses_the_new_key_changes_nothing(
    router: FakeRouter, capsys: pytest.CaptureFixture[str]
) -> None:
    """The router still runs with the keys this run replaces: the real run restarts it before this task."""
    router.api_key = "old-key"
    checked = run_main(capsys, router_url=router.url, workers=[W1], api_key="new-key", _ansible_check_mode=True)
    assert checked["changed"] is False and "HTTP 401" in checked["msg"]
    failed = run_main(capsys, router_url=router.url, workers=[W1], api_key="new-key")
    assert failed["failed"] is True and "HTTP 401" in failed["msg"]


def test_deploys_probe_finds_a_router_in_sync_only_when_reconcile_would_change_nothing(
    router: FakeRouter, tmp_path: Path
) -> None:
    """members_in_sync (the probe's read) agrees with reconcile: nothing to say only when reconcile changes nothing. (It
    takes every planned worker as ready: one the router lists unhealthy, or lacks while it is not ready, differs, and the
    reconcile that follows may then change nothing. Safe: the probe never hides a change.)"""
    workers_file = str(tmp_path / "router-workers.json")
    planned = [W1, W2]
    models = {W1: "/models/qwen", W2: "/models/qwen"}

    def in_sync() -> str | None:
        return sglang_router_client.members_in_sync(router.url, planned, models=models, workers_file=workers_file)

    router.register(W1)
    assert "to register ['" + W2 + "']" in str(in_sync()), "a planned worker the router lacks"
    module.reconcile(router.url, planned, ready=lambda url: None, models=models, workers_file=workers_file)
    router._tick()
    assert in_sync() is None, "registered, and the workers file written"
    assert (
        module.reconcile(router.url, planned, ready=lambda url: None, models=models, workers_file=workers_file)["changed"]
        is False
    )
    Path(workers_file).write_bytes(b"\xff\xfe not text")
    assert "cannot read" in str(in_sync()), "a workers file it cannot read is never taken as in sync"
    Path(workers_file).unlink()
    Path(workers_file).mkdir()
    assert "cannot read" in str(in_sync()), "nor one that is no file"
    Path(workers_file).rmdir()
    Path(workers_file).write_text("{}\n")
    assert "differs from its workers" in str(in_sync()), "a workers file edited by hand"
    module.reconcile(router.url, planned, ready=lambda url: None, models=models, workers_file=workers_file)
    router.register(W3)
    assert "to remove ['" + W3 + "']" in str(in_sync()), "a worker no longer planned"
    assert sglang_router_client.members_in_sync(router.url, planned, models={W1: "other"}, workers_file=None), "another model"
    router.api_key = "sk-admin"
    assert "cannot list its workers" in str(in_sync()), "a router it cannot ask is never taken as in sync"


def test_deploys_probe_asks_each_router_with_its_kinds_admin_key_else_the_clients_key() -> None:
    processes = [
        {"kind": "router", "url": "http://127.0.0.1:30100", "workers": [W1], "keep": [], "models": {W1: "m"},
         "workers_file": "/var/lib/sglang/router-workers.json", "unit": "sglang-router.service"},
        {"kind": "gateway", "url": "https://127.0.0.1:30200", "workers": [W1, W2], "keep": ["10.0.0.9"], "models": {},
         "workers_file": "/var/lib/sglang/gateway-workers.json", "unit": "sglang-gateway.service", "ca_file": "/etc/ca.pem"},
    ]  # fmt: skip
    reads = sglang_router_member_reads(processes, {"router": "sk-admin", "gateway": ""}, "sk-clients")
    assert reads == [
        {"url": "http://127.0.0.1:30100", "workers": [W1], "keep_hosts": [], "models": {W1: "m"},
         "workers_file": "/var/lib/sglang/router-workers.json", "api_key": "sk-admin", "ca_file": ""},
        {"url": "https://127.0.0.1:30200", "workers": [W1, W2], "keep_hosts": ["10.0.0.9"], "models": {},
         "workers_file": "/var/lib/sglang/gateway-workers.json", "api_key": "sk-clients", "ca_file": "/etc/ca.pem"},
    ]  # fmt: skip
