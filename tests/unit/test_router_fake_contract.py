"""The unit tests' stand-in gateway (test_sglang_router_client.FakeRouter) answers as the real smg 1.13.0 did
(tests/recordings/smg-1.13.0/answers.json): the same statuses, the same keys in the registry's answers, and a removal
that shows the worker draining before it is unlisted."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_mode_args
from test_sglang_router_client import W1, W2, FakeRouter

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "recordings/smg-1.13.0/answers.json").read_text())
KEY = "admin"


@pytest.fixture
def fake() -> Iterator[FakeRouter]:
    router = FakeRouter()
    router.api_key = KEY
    router.remove_after = 2
    thread = threading.Thread(target=router.server.serve_forever, daemon=True)
    thread.start()
    yield router
    router.server.shutdown()
    router.server.server_close()
    thread.join(timeout=5)


def ask(router: FakeRouter, method: str, path: str, body: Any = None, key: str = KEY) -> tuple[int, Any]:
    request = urllib.request.Request(router.url + path, method=method, data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), None


def test_the_registry_listing_has_the_recorded_shape(fake: FakeRouter) -> None:
    fake.register(W1)
    status, listing = ask(fake, "GET", "/workers")
    recorded = RECORDED["GET /workers"]
    assert status == recorded["status"]
    assert set(listing) == set(recorded["body"])
    assert set(listing["stats"]) == set(recorded["body"]["stats"])
    recorded_keys = set(recorded["body"]["workers"][0])
    assert set(listing["workers"][0]) <= recorded_keys, set(listing["workers"][0]) - recorded_keys
    assert listing["workers"][0]["status"] == recorded["body"]["workers"][0]["status"] == "ready"


def test_without_the_admin_key_the_registry_answers_401(fake: FakeRouter) -> None:
    assert ask(fake, "GET", "/workers", key="")[0] == RECORDED["GET /workers (no key)"]["status"] == 401
    assert ask(fake, "GET", "/workers", key="client")[0] == RECORDED["GET /workers (client key)"]["status"] == 401


def test_an_addition_answers_as_recorded(fake: FakeRouter) -> None:
    status, body = ask(fake, "POST", "/workers", {"url": W2, "model_id": "m"})
    recorded = RECORDED["POST /workers"]
    assert status == recorded["status"] == 202
    assert set(body) == set(recorded["body"])
    assert body["status"] == recorded["body"]["status"]


def test_a_removal_drains_then_unlists_as_recorded(fake: FakeRouter) -> None:
    worker_id = fake.register(W1)
    fake.register(W2)
    status, body = ask(fake, "DELETE", f"/workers/{worker_id}")
    recorded = RECORDED["DELETE /workers/{id}"]
    assert status == recorded["status"] == 202
    assert set(body) == set(recorded["body"])
    seen: list[Any] = []
    for _ in range(4):
        listed = {w["url"]: (w["status"], w["is_healthy"]) for w in ask(fake, "GET", "/workers")[1]["workers"]}
        if not seen or seen[-1] != listed.get(W1):
            seen.append(listed.get(W1))
    # The real gateway: [ready, draining (not healthy), unlisted] (its discovery re-adds a manifest's worker later).
    [after_delete, unlisted, *_] = RECORDED["after DELETE"]
    removed_url = next(url for url, *_ in after_delete[1] if url not in [u for u, *_ in unlisted[1]])
    recorded_states = [next(((s, h) for u, s, h in state if u == removed_url), None) for _, state in (after_delete, unlisted)]
    assert seen == recorded_states == [("draining", False), None]


POLICY = json.loads((Path(__file__).resolve().parents[1] / "recordings/smg-1.13.0/power_of_two.json").read_text())


def test_power_of_two_starts_only_in_the_mode_the_fleet_gives_it() -> None:
    """As recorded (the real routers started as the fleet starts them, workers registered after the start): smg
    1.13.0 and sglang-router 0.3.2 refuse power_of_two in their single-pool mode; smg's multi-model mode starts,
    answers and spreads the requests over both workers (0.3.2's panicked offline fetching its vocabulary). The unit's
    mode flags follow: the multi-model mode for power_of_two, with one model or several."""
    refusal = "Power-of-two policy requires at least 2 workers"
    for router in ("smg single-pool", "sglang-router single-pool"):
        assert not POLICY[router]["started"] and refusal in POLICY[router]["error"][0], router
    served = POLICY["smg --enable-igw"]
    assert served["started"] and served["statuses"] == [200] and all(served["served_per_worker"])
    assert not POLICY["sglang-router --enable-igw"]["started"]
    assert sglang_router_mode_args(False, "power_of_two") == sglang_router_mode_args(True, "power_of_two") == ["--enable-igw"]
    assert sglang_router_mode_args(False, "cache_aware") == []
