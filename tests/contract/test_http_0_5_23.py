"""SGLang 0.5.23's HTTP behaviour, as far as this machine can pin it: what its own source defines, extracted from
the real wheel by simulator/tools/extract_http_contract.py into data/sglang-0.5.23-http.json (routes and their
methods, the status of /health, /health_generate and /ready while starting, up and draining, the fields of
/model_info and /server_info, the deprecation warnings, the paths the API key never guards), replayed here against
the simulator started as 0.5.23 (the sandbox's release, of which no recording exists yet: every recording under
tests/recordings is of 0.5.17). When a GPU machine that runs 0.5.23 is lent, a recording replaces this.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sglang_simulator.facts import SGLANG_VERSION
from sglang_simulator.server import route_table
from simulator.simkit import Env, Response, Server, free_port, http, make_model, write_gpus

DATA = json.loads((Path(__file__).parent / "data/sglang-0.5.23-http.json").read_text())
KEY = "test-key-0523"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROBES = ("/health", "/health_generate", "/ready")


def real_routes() -> dict[str, set[str]]:
    """path -> methods of the routes 0.5.23 registers by default (no environment variable, no other condition than
    --enable-metrics, which the replay sets)."""
    routes: dict[str, set[str]] = {}
    for route in DATA["routes"]:
        if (
            route["path"]
            and not route.get("environment")
            and route.get("conditions", ["enable_metrics"])
            in (
                ["enable_metrics"],
                ["not (_ollama_root_route is not None)"],
            )
        ):
            routes.setdefault(route["path"], set()).update(route["methods"])
    return routes


def expected(probe: str, state: str) -> int:
    statuses = DATA["ready" if probe == "/ready" else "health"]["statuses"]
    return int(statuses[state])


def concrete(path: str) -> str:
    return path.replace("{model:path}", "no-such-model").replace("{response_id}", "resp-1").replace("{method}", "x")


Started = tuple[Server, dict[str, list[int]]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """The simulator as 0.5.23 with an API key and metrics, and what the probes answered while it started (its
    warm-up takes 1.5 s). The last test of the module stops it."""
    tmp = tmp_path_factory.mktemp("sim0523")
    gpus = tmp / "gpus.json"
    write_gpus(gpus)
    env = Env(tmp=tmp, gpus_file=gpus, state_dir=tmp / "state").environ(
        SGLANG_SIM_VERSION="0.5.23", SGLANG_SIM_WARMUP_SECONDS="1.5"
    )
    port = free_port()
    args = ["--model-path", str(make_model(tmp / "model")), "--api-key", KEY, "--enable-metrics"]
    sim = Server([*args, "--host", "127.0.0.1", "--port", str(port)], env, port)
    try:
        sim.wait_listening()
        starting = {probe: [sim.get(probe).status] for probe in PROBES}
        sim.wait_ready(timeout=20)
        yield sim, starting
    finally:
        sim.stop()


def test_the_data_is_0_5_23s_own_source() -> None:
    assert DATA["sglang_version"] == "0.5.23" == SGLANG_VERSION, "the simulator's default release is the data's"
    assert DATA["source"].startswith("Extracted by simulator/tools/extract_http_contract.py from the sglang 0.5.23")
    assert len(real_routes()) > 60 and {"/generate", "/health", "/ready", "/server_info"} <= set(real_routes())
    assert DATA["health"]["not_evaluated"] == [], "every condition of /health was evaluated for each state"


def test_every_route_the_simulator_serves_is_0_5_23s_with_the_same_methods() -> None:
    real = real_routes()
    for path, methods in route_table("0.5.23", enable_metrics=True).items():
        assert path in real, f"the simulator serves {path}, which 0.5.23 does not have"
        assert set(methods) == real[path], f"{path}: the simulator answers {sorted(methods)}, 0.5.23 {sorted(real[path])}"


def test_0_5_17s_own_routes_are_not_served_as_0_5_23() -> None:
    gone = set(route_table("0.5.17", enable_metrics=True)) - set(real_routes())
    assert gone == {"/get_load"}
    assert not gone & set(route_table("0.5.23", enable_metrics=True))


def test_the_probes_while_starting_are_0_5_23s(server: Started) -> None:
    _, starting = server
    assert starting == {probe: [expected(probe, "starting")] for probe in PROBES}


def test_the_probes_once_up_are_0_5_23s(server: Started) -> None:
    sim, _ = server
    assert {probe: sim.get(probe).status for probe in PROBES} == {probe: expected(probe, "up") for probe in PROBES}


def test_a_route_0_5_23_has_and_the_simulator_does_not_is_not_found(server: Started) -> None:
    """It does not pretend: 404, never another answer, for each of 0.5.23's routes it does not model."""
    sim, _ = server
    served = route_table("0.5.23", enable_metrics=True)
    missing = {path: methods for path, methods in real_routes().items() if path not in served}
    assert missing
    answers = {path: sim.get(concrete(path), method=sorted(methods)[0], headers=AUTH).status for path, methods in missing.items()}
    assert answers == dict.fromkeys(missing, 404)


def test_a_method_0_5_23_does_not_take_is_not_allowed(server: Started) -> None:
    sim, _ = server
    real = real_routes()
    for path in route_table("0.5.23", enable_metrics=True):
        other = next(m for m in ("DELETE", "PUT", "POST", "GET") if m not in real[path])
        answer: Response = sim.get(concrete(path), method=other, headers=AUTH, body={} if other != "GET" else None)
        assert answer.status == 405, f"{other} {path}: {answer.status}"


def test_model_info_and_server_info_have_0_5_23s_fields(server: Started) -> None:
    sim, _ = server
    model_info = sim.get("/model_info", headers=AUTH).json()
    assert set(DATA["model_info_fields"]["always"]) <= set(model_info)
    # "embedding" is set under `if embedding_model_spec is not None`, and ModelConfig resolves a spec for every model
    # (configs/embedding_model_spec.py resolve_embedding_model_spec): recorded on 0.5.17 for a generative one.
    assert DATA["model_info_fields"]["conditional"] == ["embedding"]
    assert model_info["embedding"]["enabled"] is False and model_info["is_generation"] is True
    server_info = sim.get("/server_info", headers=AUTH).json()
    fields = DATA["server_info_fields"]
    assert set(fields["server_info"]["always"]) | set(fields["build_server_info"]["always"]) <= set(server_info)
    assert server_info["version"] == "0.5.23"


def test_the_api_key_never_guards_0_5_23s_probe_paths(server: Started) -> None:
    sim, _ = server
    assert DATA["unguarded"] == {"methods": ["OPTIONS"], "path_prefixes": ["/health", "/metrics", "/ready"]}
    for prefix in DATA["unguarded"]["path_prefixes"]:
        assert sim.get(prefix).status == 200, prefix
    assert sim.get("/model_info").status == 401
    assert sim.get("/model_info", headers=AUTH).status == 200


def test_deprecated_routes_warn_with_0_5_23s_words(server: Started) -> None:
    sim, _ = server
    for path in ("/get_model_info", "/get_server_info"):
        assert sim.get(path, headers=AUTH).status == 200
    assert set(DATA["deprecated"]) >= {"/get_model_info", "/get_server_info"}


def test_zz_the_probes_while_draining_are_0_5_23s(server: Started) -> None:
    """Last in the module (it stops the server): SIGTERM, then /health and /ready until the server is gone. Its log,
    read once it is gone, holds the deprecated routes' warnings (asked here too: the test runs alone under -k)."""
    sim, _ = server
    for path in ("/get_model_info", "/get_server_info"):
        assert sim.get(path, headers=AUTH).status == 200
    sim.proc.send_signal(signal.SIGTERM)
    answers: list[int] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and sim.proc.poll() is None:
        try:
            answers += [http(sim.port, probe, timeout=2).status for probe in ("/health", "/ready")]
        except OSError:
            break
        time.sleep(0.05)
    log = sim.stop()
    # The signal reaches the server asynchronously: answers given before it was handled are the "up" ones; from
    # the first draining answer on, every answer is the draining one until the server is gone.
    draining = {expected("/health", "draining")} | {expected("/ready", "draining")}
    assert len(draining) == 1 and draining != {expected("/health", "up")}
    first = next((i for i, status in enumerate(answers) if status in draining), None)
    assert first is not None, f"no draining answer: {answers}"
    assert set(answers[:first]) <= {expected("/health", "up")}, answers
    assert set(answers[first:]) == draining, answers
    for path in ("/get_model_info", "/get_server_info"):
        assert DATA["deprecated"][path] in log
