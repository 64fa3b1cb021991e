"""The simulator against recordings of real SGLang (tests/recordings/*): same requests, same structure, and the
same VALUES wherever the simulator models them (NOT_MODELLED lists the rest, each with why).

For each recording folder and each scenario in it (``http.<scenario>.json``), a simulator is started on
127.0.0.1 with the recorded launch command (model paths replaced by a stand-in model, the GPU file shaped
like the recording machine's, ``SGLANG_SIM_VERSION`` set to the recorded release when the simulator has
its table) and sent the same requests. Compared: status codes, content types, empty vs non-empty bodies,
JSON structure (structure.py states the rules), ``/server_info`` (every recorded key, ``internal_states[0]``
too), every ``sglang:`` metric family with its label names, the health transitions while starting, the exit
status after SIGTERM, the log lines in LOG_PATTERNS, and launches that fail by themselves. Values: every
/server_info value (resolved settings, speculative ones included, token limits, status), the KV pool where the
launch caps it, and the /metrics gauges that report settings.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from .recordings import (
    Failure,
    FailureRun,
    Recording,
    Replay,
    Scenario,
    Workspace,
    recordings,
    replay,
    run_failure,
    strip_prefix,
)
from .structure import REDACTED, compare_json, compare_metrics, compare_sse, sse_events

SCENARIOS = [scenario for recording in recordings() for scenario in recording.scenarios()]
FAILURES = [failure for recording in recordings() for failure in recording.failures()]

# JSON paths whose value real SGLang sets only in some states, so null is a right answer too.
NULLABLE = (
    "*.cached_tokens_details",  # null until tokens come from the prefix cache
    "$[*].cached_tokens_details",
)

# Log lines that operators, the product's journal tails or the tests look for. When the pattern matches
# the recorded log, it must match the simulator's log of the same scenario.
LOG_PATTERNS = {
    "server args": r"server_args=",
    "load begin": r"Load weight begin\. avail mem=[\d.]+ GB",
    "load end": r"Load weight end\. elapsed=[\d.]+ s, type=\w+, avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.",
    "kv cache": r"KV Cache is allocated\. dtype: \S+, #tokens: \d+, K size: [\d.]+ GB, V size: [\d.]+ GB",
    "memory pool": r"Memory pool end\. avail mem=[\d.]+ GB",
    "sizes": r"max_total_num_tokens=\d+, chunked_prefill_size=\d+, max_prefill_tokens=\d+, "
    r"max_running_requests=\d+, context_len=\d+, available_gpu_mem=[\d.]+ GB",
    "startup timings": r"Engine startup timings \(s\): load_weight=[\d.]+, kv_cache_allocation=[\d.]+, "
    r"scheduler_e2e=[\d.]+, cuda_graph=\{[^}]*\}, tokenizer_e2e=[\d.]+",
    "uvicorn started": r"INFO:     Started server process \[\d+\]",
    "uvicorn running": r"INFO:     Uvicorn running on http://\S+ \(Press CTRL\+C to quit\)",
    "health 503 access line": r'INFO:     [\d.]+:\d+ - "GET /health HTTP/1\.1" 503 Service Unavailable',
    "health 200 access line": r'INFO:     [\d.]+:\d+ - "GET /health HTTP/1\.1" 200 OK',
    "fired up": r"The server is fired up and ready to roll!",
    "decode batch": r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, "
    r"(accept len: [\d.]+, accept rate: [\d.]+, )?cuda graph: \w+, gen throughput \(token/s\): [\d.]+, "
    r"#queue-req: \d+",
    "accept len": r"accept len: [\d.]+, accept rate: [\d.]+",
    "spec max running": r"Max running requests is reset to 48 for speculative decoding",
    "deprecated get_model_info": r"Endpoint '/get_model_info' is deprecated",
    "deprecated get_server_info": r"Endpoint '/get_server_info' is deprecated",
    "sigterm": r"SIGTERM received\. signum=None frame=None\. Draining requests and shutting down\.\.\.",
    "crash diagnostics": r"Sleeping 5 seconds before crash diagnostics to let GPU activity settle\.",
    "kill tree": r"kill_process_tree called: parent_pid=\d+, include_parent=True, pid=\d+",
}


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Workspace]:
    return {r.name: Workspace(tmp_path_factory.mktemp(r.name), r) for r in recordings()}


_replays: dict[str, Replay] = {}


@pytest.fixture(params=SCENARIOS, ids=[s.id for s in SCENARIOS])
def replayed(request: pytest.FixtureRequest, workspaces: dict[str, Workspace]) -> Replay:
    """The simulator's answers to one scenario (run once per test session)."""
    scenario: Scenario = request.param
    if scenario.id not in _replays:
        _replays[scenario.id] = replay(scenario, workspaces[scenario.recording.name])
    return _replays[scenario.id]


def _report(what: str, diffs: list[str]) -> str:
    return f"{what}: the simulator differs from real SGLang in {len(diffs)} place(s):\n  " + "\n  ".join(diffs)


# -- the comparisons, as functions the tests below and the self-test share --------------------------------


def http_differences(replayed: Replay) -> list[str]:
    diffs: list[str] = []
    for exchange, answer in replayed.answers:
        where = f"{exchange.method} {exchange.path}"
        if answer.status != exchange.status:
            diffs.append(f"{where}: status {answer.status}, real SGLang {exchange.status}")
            continue
        if answer.media_type != exchange.media_type:
            diffs.append(f"{where}: content type {answer.media_type}, real SGLang {exchange.media_type}")
        if (not answer.body) != exchange.empty:
            diffs.append(f"{where}: body {'empty' if not answer.body else 'not empty'}, real SGLang the opposite")
        if exchange.stream is not None:
            diffs += [f"{where}: {d}" for d in compare_sse(sse_events(exchange.stream), sse_events(answer.lines()), NULLABLE)]
        elif exchange.json is not None and answer.media_type == "application/json":
            diffs += [f"{where}: {d}" for d in compare_json(exchange.json, answer.json(), "$", NULLABLE)]
    return diffs


def server_info_differences(
    recorded: dict[str, Any], simulated: dict[str, Any], simulated_version: str, recorded_version: str
) -> list[str]:
    """Structure differences; with the simulator at another release, recorded ServerArgs fields it lacks are
    version gaps, not differences (they are checked once the simulator has the recorded release's table)."""
    diffs = compare_json(recorded, simulated, "$", NULLABLE)
    if simulated_version != recorded_version:
        state_keys = set((recorded.get("internal_states") or [{}])[0])
        gaps = {f"$.{key}: missing from the simulator's answer" for key in recorded if key in state_keys}
        diffs = [d for d in diffs if d not in gaps]
    return diffs


# /server_info values the simulator does not model, each with why. Every other recorded value (the resolved settings,
# the speculative ones included, the token limits, the status) must be the simulator's, not only of the same type.
NOT_MODELLED = {
    # the replay runs a stand-in model elsewhere (recordings.Workspace), and its own command line
    "*.model_path": "stand-in path",
    "*.tokenizer_path": "stand-in path",
    "*.speculative_draft_model_path": "stand-in path",
    "*.served_model_name": "the stand-in's path where the recording named none",
    "*.port": "the replay's free port",
    "*.nccl_port": "the replay's free port",
    "*.random_seed": "drawn at start",
    "*.launch_command": "the replay's own command line",
    # measured on the recording machine
    "*.startup_time.*": "timings",
    "*.memory_usage.weight": "measured GPU memory",
    "*.memory_usage.kvcache": "measured GPU memory",
    "*.memory_usage.startup_available": "measured GPU memory",
    "*.memory_usage.graph.*": "measured GPU memory",
    "*.last_gen_throughput": "measured",
    "*.avg_spec_accept_length": "measured (test_nextn_without_mtp.py compares it where the simulator models it)",
    # resolved at start from the GPU and the attention backend, which the simulator does not model
    "*.cuda_graph_config.decode.bs": "capture sizes chosen from the GPU's memory",
    "*.cuda_graph_config.prefill.bs": "capture sizes chosen from the GPU's memory",
    "*.disable_chunked_prefix_cache": "set by the model runner from the attention backend",
}
# The KV pool is the simulator's estimate from free memory and the model's shape, except where the launch caps it
# with --max-total-tokens: there the simulator claims the recorded value (simulator/README.md), so it is compared.
KV_POOL = ("*.max_total_num_tokens", "*.memory_usage.token_capacity")
# Values whose order real SGLang does not fix (set iteration): compared as sorted lists.
UNORDERED = ("*._cuda_graph_config_locked",)
# /metrics gauges that report settings: compared by value on every sample (the KV pool's where it is capped).
SETTING_GAUGES = ("sglang:context_len", "sglang:page_size")
KV_POOL_GAUGES = ("sglang:max_total_num_tokens", "sglang:num_pages")


def kv_pool_capped(scenario: Scenario) -> bool:
    return "--max-total-tokens" in scenario.args


def _leaves(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def _at(value: Any, path: str) -> Any:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, index = part
        if key:
            if not isinstance(value, dict) or key not in value:
                return KeyError
            value = value[key]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                return KeyError
            value = value[int(index)]
    return value


def server_info_value_differences(recorded: dict[str, Any], simulated: dict[str, Any], kv_capped: bool) -> list[str]:
    """Recorded values the simulator answers otherwise (paths it lacks are the structure test's)."""
    from fnmatch import fnmatchcase

    excused = tuple(NOT_MODELLED) + (() if kv_capped else KV_POOL)
    diffs = []
    for path, value in _leaves(recorded, "$"):
        sim = _at(simulated, path)
        if sim is KeyError or value is None or value == REDACTED or any(fnmatchcase(path, p) for p in excused):
            continue
        if any(fnmatchcase(path, p) for p in UNORDERED):
            value, sim = sorted(map(json.dumps, value)), sorted(map(json.dumps, sim))
        if value != sim:
            diffs.append(f"{path}: {json.dumps(sim)}, real SGLang {json.dumps(value)}")
    return diffs


def metric_value_differences(recorded: str, simulated: str, kv_capped: bool) -> list[str]:
    def samples(text: str, name: str) -> dict[str, float]:
        pattern = rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$"
        return {labels: float(value) for labels, value in re.findall(pattern, text, re.MULTILINE)}

    diffs = []
    for name in SETTING_GAUGES + (KV_POOL_GAUGES if kv_capped else ()):
        real = set(samples(recorded, name).values())
        sim = set(samples(simulated, name).values())
        if real and sim != real:
            diffs.append(f"{name}: {sorted(sim)}, real SGLang {sorted(real)}")
    return diffs


# -- tests ---------------------------------------------------------------------------------------------


def test_there_are_recordings() -> None:
    assert SCENARIOS, "no recording under tests/recordings/ has an http.<scenario>.json"


def test_http_answers_have_the_recorded_structure(replayed: Replay) -> None:
    diffs = http_differences(replayed)
    assert not diffs, _report(replayed.scenario.id, diffs)


def test_server_info_has_every_recorded_field(replayed: Replay) -> None:
    scenario = replayed.scenario
    diffs: list[str] = []
    for label, recorded_stages, answers in (
        ("/server_info", scenario.server_info, replayed.server_info),
        ("/get_server_info", scenario.get_server_info, replayed.get_server_info),
    ):
        for stage, recorded in recorded_stages.items():
            answer = answers[stage]
            if answer.status != recorded["status"]:
                diffs.append(f"{label} ({stage or 'after'}): status {answer.status}, real SGLang {recorded['status']}")
                continue
            body = answer.json()
            found = server_info_differences(recorded["body"], body, str(body.get("version")), scenario.recording.version)
            diffs += [f"{label} ({stage or 'after'}) {d}" for d in found]
    assert not diffs, _report(scenario.id, diffs)


def test_server_info_and_setting_gauges_hold_the_recorded_values(replayed: Replay) -> None:
    """Values, not only structure: every recorded /server_info value the simulator models (NOT_MODELLED lists the
    rest, with why), and the gauges that report settings."""
    scenario = replayed.scenario
    capped = kv_pool_capped(scenario)
    diffs: list[str] = []
    for label, recorded_stages, answers in (
        ("/server_info", scenario.server_info, replayed.server_info),
        ("/get_server_info", scenario.get_server_info, replayed.get_server_info),
    ):
        for stage, recorded in recorded_stages.items():
            if answers[stage].status == recorded["status"] == 200:
                found = server_info_value_differences(recorded["body"], answers[stage].json(), capped)
                diffs += [f"{label} ({stage or 'after'}) {d}" for d in found]
    for stage, text in scenario.metrics.items():
        found = metric_value_differences(text, replayed.metrics[stage], capped)
        diffs += [f"metrics{'.' + stage if stage else ''}: {d}" for d in found]
    assert not diffs, _report(scenario.id, diffs)


def test_the_recordings_hold_capped_kv_pools_to_compare() -> None:
    """The KV pool is compared only where --max-total-tokens caps it: some recordings must."""
    assert [s.id for s in SCENARIOS if kv_pool_capped(s)], "no recording caps the KV pool: max_total_num_tokens unchecked"


def test_a_changed_value_is_reported(replayed: Replay) -> None:
    """The value comparison catches a doubled token limit, a changed speculative setting and a changed status."""
    scenario = replayed.scenario
    stage, recorded = next(iter(scenario.server_info.items()))
    body = replayed.server_info[stage].json()
    capped = kv_pool_capped(scenario)
    assert not server_info_value_differences(recorded["body"], body, capped)
    doubled = copy.deepcopy(body)
    doubled["max_total_num_tokens"] *= 2
    doubled["internal_states"][0]["page_size"] += 1
    doubled["max_req_input_len"] -= 1
    found = server_info_value_differences(recorded["body"], doubled, capped)
    assert ("$.max_total_num_tokens: " in " ".join(found)) is capped
    assert any(d.startswith("$.internal_states[0].page_size: ") for d in found)
    assert any(d.startswith("$.max_req_input_len: ") for d in found)
    if recorded["body"].get("speculative_num_steps") is not None:  # a speculative launch
        respeculated = copy.deepcopy(body)
        respeculated["speculative_num_steps"] += 1
        found = server_info_value_differences(recorded["body"], respeculated, capped)
        assert any(d.startswith("$.speculative_num_steps: ") for d in found)
    restated = copy.deepcopy(body)
    restated["status"] = "starting"
    assert any(d.startswith("$.status: ") for d in server_info_value_differences(recorded["body"], restated, capped))


def test_avg_spec_accept_length_appears_like_real_sglang(replayed: Replay) -> None:
    """Absent before the first decode-log window, present after it (when the recording shows both)."""
    scenario = replayed.scenario
    for stage, recorded in scenario.server_info.items():
        if recorded.get("status") != 200:
            continue
        real = "avg_spec_accept_length" in recorded["body"]["internal_states"][0]
        sim = "avg_spec_accept_length" in replayed.server_info[stage].json()["internal_states"][0]
        assert sim == real, f"{scenario.id} ({stage or 'after'}): avg_spec_accept_length present={sim}, real SGLang {real}"


def test_metrics_have_every_recorded_family_and_label(replayed: Replay) -> None:
    diffs: list[str] = []
    for stage, text in replayed.scenario.metrics.items():
        diffs += [
            f"metrics.{replayed.scenario.name}{'.' + stage if stage else ''}: {d}"
            for d in compare_metrics(text, replayed.metrics[stage])
        ]
    assert not diffs, _report(replayed.scenario.id, diffs)


def test_health_while_starting(replayed: Replay) -> None:
    """Refused until HTTP binds, then 503 with an empty body during warmup, then 200 with an empty body."""
    recorded = replayed.scenario.timeline.get("health_transitions")
    assert recorded, f"{replayed.scenario.id}: the recording has no health transitions (every recording needs them)"
    for path, transitions in recorded.items():
        real = [(t["status"], t["body"]) for t in transitions]
        assert replayed.health[path] == real, f"{path}: simulator {replayed.health[path]}, real SGLang {real}"


def test_exit_status_after_sigterm(replayed: Replay) -> None:
    shutdown = replayed.scenario.timeline.get("shutdown")
    assert shutdown, f"{replayed.scenario.id}: the recording has no shutdown (every recording needs its exit status)"
    assert replayed.returncode == shutdown["returncode"], replayed.log[-2000:]


def test_log_lines(replayed: Replay) -> None:
    real = "\n".join(strip_prefix(line) for line in replayed.scenario.log.splitlines())
    missing = [
        name for name, pattern in LOG_PATTERNS.items() if re.search(pattern, real) and not re.search(pattern, replayed.log)
    ]
    assert not missing, _report(
        replayed.scenario.id, [f"no log line like the recorded {name!r}: {LOG_PATTERNS[name]}" for name in missing]
    )


_failure_runs: dict[str, FailureRun] = {}


@pytest.mark.parametrize("failure", FAILURES, ids=[f.id for f in FAILURES])
def test_failed_launches(failure: Failure, workspaces: dict[str, Workspace]) -> None:
    """A launch that ended by itself: same exit status, listening or not as it did, the same error line (numbers
    and quoted paths aside: the replay's model is a stand-in elsewhere)."""
    run = run_failure(failure, workspaces[failure.recording.name])
    assert run.returncode == failure.returncode, run.log[-3000:]
    if failure.listened:
        assert run.answered, "the simulator never listened; real SGLang did before it failed"
    else:
        assert not run.answered, "the simulator listened; real SGLang never did"

    def shape(line: str) -> str:
        return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", re.sub(r"'/[^']*'", "'PATH'", line))

    produced = {shape(strip_prefix(line)) for line in run.log.splitlines()}
    for line in failure.error_lines:
        assert shape(line) in produced, f"no line like {line!r} in:\n{run.log[-3000:]}"


# -- the comparison catches a removed field (so a simulator that drops one fails the tests above) --------


def test_a_field_removed_from_the_simulator_is_reported(replayed: Replay) -> None:
    scenario = replayed.scenario
    assert scenario.server_info, f"{scenario.id}: the recording has no /server_info (every recording needs one)"
    assert scenario.metrics, f"{scenario.id}: the recording has no /metrics (every recording needs one)"
    stage, recorded = next(iter(scenario.server_info.items()))
    body = replayed.server_info[stage].json()
    version = str(body.get("version"))
    assert not server_info_differences(recorded["body"], body, version, scenario.recording.version)

    top = copy.deepcopy(body)
    del top["max_total_num_tokens"]
    assert "$.max_total_num_tokens: missing from the simulator's answer" in server_info_differences(
        recorded["body"], top, version, scenario.recording.version
    )
    state = copy.deepcopy(body)
    del state["internal_states"][0]["memory_usage"]["token_capacity"]
    assert "$.internal_states[].memory_usage.token_capacity: missing from the simulator's answer" in server_info_differences(
        recorded["body"], state, version, scenario.recording.version
    )
    retyped = copy.deepcopy(body)
    retyped["max_total_num_tokens"] = str(retyped["max_total_num_tokens"])
    assert server_info_differences(recorded["body"], retyped, version, scenario.recording.version)

    generate = next((pair for pair in replayed.answers if pair[0].path == "/generate" and pair[0].json), None)
    if generate is not None:
        exchange, answer = generate
        stripped = copy.deepcopy(replayed)
        stripped_answer = copy.deepcopy(answer)
        meta = answer.json()
        del meta["meta_info"]["completion_tokens"]
        stripped_answer.body = __import__("json").dumps(meta).encode()
        stripped.answers = [(exchange, stripped_answer)]
        assert any("meta_info.completion_tokens: missing" in d for d in http_differences(stripped))

    for stage, text in scenario.metrics.items():
        without = "\n".join(line for line in replayed.metrics[stage].splitlines() if "sglang:num_running_reqs" not in line)
        assert "sglang:num_running_reqs: gauge missing from the simulator's /metrics" in compare_metrics(text, without)
        relabeled = replayed.metrics[stage].replace('tp_rank="0"', 'rank="0"')
        assert any("no simulator sample with the labels" in d for d in compare_metrics(text, relabeled))


def test_recordings_are_complete() -> None:
    """Each recording keeps its README (how it was made) and the logs the scenarios replay."""
    for recording in recordings():
        assert (recording.path / "README.md").read_text().strip()
    for scenario in SCENARIOS:
        assert scenario.args, scenario.id
        # What the tests above replay from every scenario: a thinner recording fails here, never skips there.
        assert scenario.timeline.get("health_transitions"), f"{scenario.id}: no health transitions"
        assert scenario.timeline.get("shutdown"), f"{scenario.id}: no shutdown"
        assert scenario.server_info and scenario.metrics, f"{scenario.id}: no /server_info or /metrics"
        assert scenario.exchanges, f"{scenario.id}: no requests"
    assert all(f.log_path.exists() for f in FAILURES)


def test_the_pipeline_layout_is_read_and_replayed(tmp_path: Path) -> None:
    """A folder as tests/hardware/driver.py writes it (one directory per tag) is replayed like the flat one."""
    source = next((s for s in SCENARIOS if s.name == "nextn" and s.server_info and s.metrics), None)
    assert source is not None, "no flat nextn recording with /server_info and /metrics to convert"
    folder = tmp_path / "sglang-pipeline"
    tag = folder / "nextn"
    tag.mkdir(parents=True)
    (tag / "server.log").write_text(source.log)
    for stage, exchange in source.server_info.items():
        if stage in ("before", "after_greedy"):
            (tag / f"server_info.{'before' if stage == 'before' else 'after'}.json").write_text(
                json.dumps({**exchange, "url": "http://127.0.0.1:30000/server_info", "method": "GET"})
            )
    greedy = next(e for e in source.exchanges if e.path == "/generate")
    (tag / "generate.greedy256.json").write_text(
        json.dumps(
            {
                "url": "http://127.0.0.1:30000/generate",
                "method": "POST",
                "request": greedy.body,
                "status": greedy.status,
                "headers": greedy.headers,
                "body": greedy.json,
            }
        )
    )
    (tag / "metrics.txt").write_text(next(iter(source.metrics.values())))
    health = {p: [{**t, "status": "refused" if t["status"] == "connection_refused" else t["status"]} for t in ts]
              for p, ts in source.timeline["health_transitions"].items()}  # fmt: skip
    (tag / "health.json").write_text(json.dumps({"changes": health}))
    (folder / "summary.json").write_text(json.dumps({"stages": {"nextn": {"sigterm": source.timeline["shutdown"]}}}))

    (scenario,) = Recording(folder).scenarios()
    assert scenario.recording.version == source.recording.version
    assert set(scenario.server_info) == {"before", "after"} and [e.path for e in scenario.exchanges] == ["/generate"]
    assert scenario.timeline["health_transitions"] == source.timeline["health_transitions"]
    (tmp_path / "work").mkdir()
    workspace = Workspace(tmp_path / "work", scenario.recording)
    replayed = replay(scenario, workspace)
    assert not http_differences(replayed)
    for stage, recorded in scenario.server_info.items():
        body = replayed.server_info[stage].json()
        assert not server_info_differences(recorded["body"], body, str(body["version"]), scenario.recording.version)
    assert not compare_metrics(scenario.metrics[""], replayed.metrics[""])
    real = {p: [(t["status"], t["body"]) for t in ts] for p, ts in scenario.timeline["health_transitions"].items()}
    assert replayed.health == real
    assert replayed.returncode == source.timeline["shutdown"]["returncode"]
