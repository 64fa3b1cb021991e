"""--api-key: which routes real SGLang 0.5.17 answers without the key, and the simulator against it.

tests/recordings/sglang-0.5.17-h200-keyed-routes/ (tests/hardware/keyed_routes.py, README.md there) holds one real
server launched with ct129's settings, --enable-metrics and --api-key, and its answers to eleven requests, each sent
without an Authorization header, with a wrong bearer key and with the key (`keyed/routes.json`). The simulator is
started here with the recorded command line (the redacted key replaced by one of this test's) on a stand-in of the
recorded model, sent the same requests in the same order, and held to every recorded status, the 401 body, the bodies
of the other refusals (404, 405), the CORS preflight's answer, and /metrics: the recorded families, and a refused
request counted nowhere (SGLang's key middleware is outside its metrics middleware).
"""

from __future__ import annotations

import json
import re
import signal
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from simulator.simkit import free_port

from .recordings import RECORDINGS, Answer, Recording, Workspace, launch_args, poll_health, request
from .structure import compare_json, compare_metrics

FOLDER = RECORDINGS / "sglang-0.5.17-h200-keyed-routes"
RECORDING = Recording(FOLDER)
LOG = (FOLDER / "keyed" / "server.log").read_text()
ROUTES: dict[str, dict[str, dict[str, Any]]] = json.loads((FOLDER / "keyed" / "routes.json").read_text())["routes"]
KEY = "sk-contract-keyed-routes"
WRONG_KEY = "sk-contract-wrong"
AUTH = {"no_key": None, "wrong_key": WRONG_KEY, "key": KEY}
CASES = [(route, label) for route in ROUTES for label in AUTH]
NULLABLE = ("*.cached_tokens_details",)  # null until tokens come from the prefix cache


def recorded(route: str, label: str) -> dict[str, Any]:
    return ROUTES[route][label]


def request_path(rec: dict[str, Any]) -> str:
    return urllib.parse.urlsplit(str(rec["url"])).path


def body(rec: dict[str, Any]) -> Any:
    return rec["body"] if "body" in rec else rec.get("body_text")


def media_type(headers: dict[str, str]) -> str | None:
    value = {k.lower(): v for k, v in headers.items()}.get("content-type")
    return value.split(";", 1)[0].strip().lower() if value else None


def cors_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control-")}


def series(metrics: str, name: str, **labels: str) -> float | None:
    """The value of the one sample of `name` with exactly `labels` (in any order), None when there is none."""
    for line in metrics.splitlines():
        match = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))) == labels:
            return float(match.group(2))
    return None


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Answer]]:
    """The simulator's answers to every recorded request, in the recorded order (route by route: no key, wrong key,
    key)."""
    workspace = Workspace(tmp_path_factory.mktemp("keyed-routes"), RECORDING)
    args = [KEY if word == "<redacted>" else word for word in launch_args(LOG)]
    port = free_port()
    proc = workspace.launch(workspace.argv(args, "", "", port, RECORDING.listed_model(args)))
    try:
        health = poll_health(port, proc, timeout=30)
        assert all(steps and steps[-1][0] == 200 for steps in health.values()), (health, proc.poll())
        out: dict[tuple[str, str], Answer] = {}
        for route, label in CASES:
            rec = recorded(route, label)
            headers = dict(rec.get("request_headers") or {})
            if AUTH[label]:
                headers["Authorization"] = f"Bearer {AUTH[label]}"
            out[route, label] = request(port, rec["method"], request_path(rec), rec.get("request"), headers=headers)
        yield out
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except Exception:
            proc.kill()
            proc.communicate()


def test_the_recording_is_complete() -> None:
    args = launch_args(LOG)
    assert RECORDING.version == "0.5.17"
    assert args[args.index("--api-key") + 1] == "<redacted>" and "--enable-metrics" in args
    assert RECORDING.listed_model(args) is not None
    assert set(ROUTES) >= {"GET /health", "GET /health_generate", "GET /ready", "GET /metrics", "GET /model_info",
                           "GET /server_info", "GET /v1/models", "POST /generate", "POST /v1/chat/completions",
                           "OPTIONS /v1/models"}  # fmt: skip
    assert all(set(by_auth) == set(AUTH) for by_auth in ROUTES.values())
    keys = {p.name: re.findall(r"sk-hw-[0-9a-f]{32}", p.read_text()) for p in FOLDER.rglob("*") if p.is_file()}
    assert not any(keys.values()), f"the run's key is in {[name for name, found in keys.items() if found]}"
    assert RECORDING.summary["stages"]["keyed"]["server_info_echoes_key"] is True


def test_what_real_sglang_answers_without_the_key() -> None:
    """The facts the fleet relies on (Prometheus scrapes /metrics with no bearer token), as recorded."""
    for route in ("GET /health", "GET /health_generate", "GET /metrics"):
        assert {label: recorded(route, label)["status"] for label in AUTH} == {"no_key": 200, "wrong_key": 200,
                                                                              "key": 200}, route  # fmt: skip
    for route in ("GET /model_info", "GET /server_info", "GET /v1/models", "POST /generate",
                  "POST /v1/chat/completions"):  # fmt: skip
        assert [recorded(route, label)["status"] for label in AUTH] == [401, 401, 200], route
    assert [recorded("GET /ready", label)["status"] for label in AUTH] == [401, 401, 404]
    assert "sglang:num_running_reqs" in body(recorded("GET /metrics", "no_key"))


@pytest.mark.parametrize(("route", "label"), CASES, ids=[f"{r}-{a}" for r, a in CASES])
def test_status_and_refusals_as_recorded(answers: dict[tuple[str, str], Answer], route: str, label: str) -> None:
    real, answer = recorded(route, label), answers[route, label]
    assert answer.status == real["status"], f"{route} ({label}): simulator {answer.status}, real SGLang {real['status']}"
    assert answer.media_type == media_type(real.get("headers") or {}), route
    if real["status"] == 401:
        assert real["body"] == {"error": "Unauthorized"}
        assert answer.json() == real["body"]
    elif real["status"] >= 400:
        assert answer.json() == real["body"]  # 404 {"detail": "Not Found"}, 405 {"detail": "Method Not Allowed"}
    if real.get("request_headers"):  # the CORS preflight
        assert answer.body.decode() == real["body_text"]
        assert cors_headers(answer.headers) == cors_headers(real["headers"])


@pytest.mark.parametrize("route", [r for r in ROUTES if isinstance(recorded(r, "key").get("body"), dict)])
def test_answers_with_the_key_have_the_recorded_structure(answers: dict[tuple[str, str], Answer], route: str) -> None:
    diffs = compare_json(recorded(route, "key")["body"], answers[route, "key"].json(), "$", NULLABLE)
    assert not diffs, diffs


def test_server_info_echoes_the_key_to_its_holder(answers: dict[tuple[str, str], Answer]) -> None:
    assert recorded("GET /server_info", "key").get("body_truncated")  # too long to keep whole; summary.json says it
    assert answers["GET /server_info", "key"].json()["api_key"] == KEY


def test_metrics_without_the_key(answers: dict[tuple[str, str], Answer]) -> None:
    for label in AUTH:
        diffs = compare_metrics(body(recorded("GET /metrics", label)), answers["GET /metrics", label].body.decode())
        assert not diffs, (label, diffs)
    # /ready was asked three times before the last /metrics: the two refused requests are counted nowhere
    real = body(recorded("GET /metrics", "key"))
    simulated = answers["GET /metrics", "key"].body.decode()
    for text in (real, simulated):
        assert series(text, "sglang:http_requests_total", endpoint="/ready", method="GET") == 1.0
        assert series(text, "sglang:http_responses_total", endpoint="/ready", method="GET", status_code="404") == 1.0
        assert series(text, "sglang:http_responses_total", endpoint="/ready", method="GET", status_code="401") is None


def test_the_key_is_not_needed_to_become_ready() -> None:
    """The driver's wait (no key) saw both health routes go refused -> 503 -> 200, as the fleet's readiness does."""
    changes = json.loads((FOLDER / "keyed" / "health.json").read_text())["changes"]
    for path in ("/health", "/health_generate"):
        assert [step["status"] for step in changes[path]] == ["refused", 503, 200], path
