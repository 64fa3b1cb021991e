"""The product's readers of SGLang's answers, fed the answers real SGLang gave (tests/recordings/).

Each recorded answer is served again from a loopback HTTP server (or handed to the reader's seam), so
what is checked is the reader's parsing of real text, not of the simulator's.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import sglang_readiness
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout, sglang_status

from .recordings import ROOT, Recording, Scenario, recordings

RECORDINGS = recordings()
SCENARIOS = [s for r in RECORDINGS for s in r.scenarios()]
METRICS = [(r, stage_file) for r in RECORDINGS for stage_file in sorted(r.path.glob("metrics.*.txt"))]


Route = tuple[int, dict[str, str], bytes]


class Recorded:
    """A loopback server answering each path with a recorded (status, headers, body); a list plays in order."""

    def __init__(self, routes: dict[str, Route | list[Route]]) -> None:
        self.routes = {path: list(answer) if isinstance(answer, list) else [answer] for path, answer in routes.items()}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                answers = owner.routes.get(self.path.split("?", 1)[0])
                if not answers:
                    status, headers, body = 404, {"content-type": "application/json"}, b'{"detail":"Not Found"}'
                else:
                    status, headers, body = answers.pop(0) if len(answers) > 1 else answers[0]
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in ("content-length", "date", "server", "transfer-encoding"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Route | list[Route]]], Recorded]]:
    servers: list[Recorded] = []

    def start(routes: dict[str, Route | list[Route]]) -> Recorded:
        servers.append(Recorded(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _text_route(text: str) -> Route:
    return 200, {"content-type": "text/plain; version=0.0.4; charset=utf-8"}, text.encode()


# -- sglang_rollout.running_requests: sglang:num_running_reqs from /metrics ----------------------------------


@pytest.mark.parametrize("recording, path", METRICS, ids=[f"{r.name}/{p.name}" for r, p in METRICS])
def test_running_requests_reads_real_metrics(recording: Recording, path: Path, serve: Callable[..., Recorded]) -> None:
    text = path.read_text()
    expected = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if re.match(r"sglang:num_running_reqs\{", line))
    assert sglang_rollout.running_requests(serve({"/metrics": _text_route(text)}).url) == expected
    busy = re.sub(r"^(sglang:num_running_reqs\{[^}]*\}) \S+$", r"\1 3.0", text, flags=re.MULTILINE)
    assert sglang_rollout.running_requests(serve({"/metrics": _text_route(busy)}).url) == 3.0
    assert not [n for n in re.findall(r"^(sglang:num_running_reqs\w+)", text, re.MULTILINE)], (
        "another family starts with sglang:num_running_reqs and would be summed in"
    )


# -- sglang_readiness: connection refused, then 503 (empty body), then 200 (empty body) -----------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_readiness_poll_follows_the_recorded_health_transitions(scenario: Scenario, serve: Callable[..., Recorded]) -> None:
    transitions = scenario.timeline.get("health_transitions") or {}
    assert transitions, f"{scenario}: the recording has no health transitions (every recording needs them)"
    for path, steps in transitions.items():
        answers: list[Route] = [(int(s["status"]), {}, s["body"].encode()) for s in steps if s["status"] != "connection_refused"]
        refused = [s for s in steps if s["status"] == "connection_refused"]
        if refused:  # nothing listens yet: a port that was free a moment ago
            closed = serve({})
            url = closed.url
            closed.close()
            assert sglang_readiness.http_status(url + path, timeout=2) is None, scenario
        server = serve({path: answers})
        seen = [sglang_readiness.http_status(server.url + path, timeout=5) for _ in answers]
        assert seen == [status for status, _, _ in answers], f"{scenario} {path}"
        ticks = iter(range(1000))

        def clock(ticks: Iterator[int] = ticks) -> float:
            return float(next(ticks))

        server = serve({path: answers})
        result = sglang_readiness.wait(
            [{"unit": "sglang-test.service", "url": server.url}],
            path,
            timeout=60,
            interval=0,
            state=lambda unit: {"ActiveState": "activating", "NRestarts": "0", "InvocationID": "x"},
            clock=clock,
            sleep=lambda seconds: None,
        )
        assert "failed" not in result and "sglang-test.service" in result["ready"], result


# -- sglang_rollout.verify: /server_info keys, meta_info.completion_tokens, avg_spec_accept_length ------------


def _verify_case(scenario: Scenario) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the instance the plan would make, the recorded answers verify() reads), when recorded."""
    generate = next((e for e in scenario.exchanges if e.path == "/generate" and isinstance(e.json, dict)), None)
    staged = {stage: x for stage, x in scenario.server_info.items() if x.get("status") == 200}
    after = [stage for stage in staged if stage != "before"]
    if generate is None or not after:
        return None
    # verify() probes with a greedy generation: the answer recorded after the greedy requests, when there is one
    chosen = "after_greedy" if "after_greedy" in after else sorted(after)[0]
    last = staged[chosen]["body"]
    algorithm = last.get("speculative_algorithm")
    speculative: dict[str, Any] = {"reported_algorithm": algorithm}
    if algorithm == "EAGLE":
        speculative.update(
            num_steps=last["speculative_num_steps"],
            eagle_topk=last["speculative_eagle_topk"],
            num_draft_tokens=last["speculative_num_draft_tokens"],
        )
    elif algorithm:
        speculative["num_draft_tokens"] = last["speculative_num_draft_tokens"]
    infos = ([staged["before"]["body"]] if "before" in staged else []) + [last]
    instance = {"name": scenario.name, "url": "http://recorded", "speculative": speculative}
    return instance, {"server_info": infos, "generate": generate.json}


VERIFY = [s for s in SCENARIOS if _verify_case(s)]


@pytest.mark.parametrize("scenario", VERIFY, ids=[s.id for s in VERIFY])
def test_rollout_verify_reads_real_answers(scenario: Scenario) -> None:
    case = _verify_case(scenario)
    assert case is not None
    instance, answers = case
    infos = list(answers["server_info"])

    def get_json(url: str, payload: dict[str, Any] | None = None) -> Any:
        if url.endswith("/generate"):
            return answers["generate"]
        return infos.pop(0) if len(infos) > 1 else infos[0]

    clock = iter(range(1000))
    host = sglang_rollout.Host(get_json=get_json, sleep=lambda s: None, clock=lambda: float(next(clock)))
    tokens = answers["generate"]["meta_info"]["completion_tokens"]
    accept = answers["server_info"][-1]["internal_states"][0].get("avg_spec_accept_length")
    if instance["speculative"]["reported_algorithm"] and accept is not None and accept <= 1.0:
        # A draft that accepts nothing (NEXTN/EAGLE on a checkpoint without its MTP layer, recorded in
        # sglang-0.5.17-h200-nextn-without-mtp/): real SGLang serves, the rollout must refuse it.
        with pytest.raises(sglang_rollout.RolloutError, match=r"is not above 1\.0: speculative decoding does not help"):
            sglang_rollout.verify(host, instance, probe_tokens=256, min_accept=1.0)
        return
    summary = sglang_rollout.verify(host, instance, probe_tokens=256, min_accept=1.0)
    assert summary.startswith(f"{tokens} tokens"), summary
    if instance["speculative"]["reported_algorithm"]:
        accept = answers["server_info"][-1]["internal_states"][0]["avg_spec_accept_length"]
        assert summary == f"{tokens} tokens, accept length {accept:.2f}"


def test_rollout_verify_waits_while_avg_spec_accept_length_is_absent() -> None:
    """Real /server_info has no avg_spec_accept_length before the first 40-step decode-log window."""
    for scenario in SCENARIOS:
        before = scenario.server_info.get("before")
        if not before or before.get("status") != 200 or not before["body"].get("speculative_algorithm"):
            continue
        body = before["body"]
        assert "avg_spec_accept_length" not in body["internal_states"][0]
        ticks = iter(range(1000))

        def get_json(url: str, payload: Any = None, body: dict[str, Any] = body) -> Any:
            return {"meta_info": {"completion_tokens": 1}} if url.endswith("/generate") else body

        def clock(ticks: Iterator[int] = ticks) -> float:
            return float(next(ticks))

        host = sglang_rollout.Host(get_json=get_json, sleep=lambda s: None, clock=clock)
        instance = {"name": "x", "url": "http://recorded", "speculative": {"reported_algorithm": body["speculative_algorithm"]}}
        with pytest.raises(sglang_rollout.RolloutError, match="did not engage"):
            sglang_rollout.verify(host, instance, probe_tokens=1, min_accept=1.0)


# -- sglang_status.describe: version, speculative algorithm, accept length -----------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_status_reads_real_server_info(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    for exchange in [*scenario.server_info.values(), *scenario.get_server_info.values()]:
        if exchange.get("status") != 200:
            continue
        body = exchange["body"]
        monkeypatch.setattr(sglang_status, "unit_properties", lambda unit: {"ActiveState": "active", "NRestarts": "0"})
        monkeypatch.setattr(sglang_status, "exposure", lambda unit: 1.0)
        monkeypatch.setattr(sglang_status, "health", lambda url, ca_data="": "ready")
        monkeypatch.setattr(sglang_status, "http_json", lambda url, api_key="", timeout=30.0, ca_data="", body=body: body)
        instance = {"name": "i", "port": 1, "url": "http://recorded", "gpu_ids": [0], "served_model_name": "m", "unit": "u"}
        state = sglang_status.describe(instance, "", 0.0)
        assert state["version"] == scenario.recording.version
        assert state["speculative_algorithm"] == body.get("speculative_algorithm")
        assert state["accept_length"] == body["internal_states"][0].get("avg_spec_accept_length")
        assert "api_key" not in state


# -- playbooks/files/bench_client.py: completion_tokens and avg_spec_accept_length ----------------------------


def _bench_client() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_client", ROOT / "playbooks/files/bench_client.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scenario", VERIFY, ids=[s.id for s in VERIFY])
def test_bench_client_reads_real_answers(scenario: Scenario, serve: Callable[..., Recorded]) -> None:
    bench = _bench_client()
    case = _verify_case(scenario)
    assert case is not None
    _, answers = case
    generate = next(e for e in scenario.exchanges if e.path == "/generate" and isinstance(e.json, dict))
    info = answers["server_info"][-1]
    server = serve(
        {
            "/generate": (int(generate.status or 200), generate.headers, json.dumps(generate.json).encode()),
            "/server_info": (200, {"content-type": "application/json"}, json.dumps(info).encode()),
        }
    )
    result = bench.measure(server.url, 2, 4, 8, "")
    assert result["failed"] == 0 and result["tokens_per_second"] > 0, result
    answer = bench.call(server.url, "/server_info", None, "")
    assert answer["internal_states"][0].get("avg_spec_accept_length") == info["internal_states"][0].get("avg_spec_accept_length")


# -- templates/prometheus/sglang-alerts.yml.j2: the metric names it queries -----------------------------------

ALERTS = (ROOT / "templates/prometheus/sglang-alerts.yml.j2").read_text()


@pytest.mark.parametrize("recording, path", METRICS, ids=[f"{r.name}/{p.name}" for r, p in METRICS])
def test_alert_metric_names_exist_in_real_metrics(recording: Recording, path: Path) -> None:
    families = set(re.findall(r"^# TYPE (\S+) ", path.read_text(), re.MULTILINE))
    queried = set(re.findall(r"\b(sglang:[a-z_]+)", ALERTS))
    assert queried and queried <= families, sorted(queried - families)


def test_accept_length_alert_is_quiet_without_speculative_decoding() -> None:
    expr = re.search(r"alert: SGLangAcceptLengthCollapsed\s+expr: (.+)", ALERTS)
    assert expr is not None
    for recording in RECORDINGS:
        for path in sorted(recording.path.glob("metrics.baseline*.txt")):
            text = path.read_text()
            value = re.search(r"^sglang:spec_accept_length\{[^}]*\} (\S+)$", text, re.MULTILINE)
            assert value is not None
            fires = float(value.group(1)) < 1.0 and "spec_num_draft_tokens" not in expr.group(1)
            assert not fires, f"{path.name}: spec_accept_length {value.group(1)} with no speculative decoding"
