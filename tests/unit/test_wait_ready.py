"""Readiness polling (module_utils/sglang_readiness) that fails fast when a unit dies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import sglang_readiness as module

RUNNING = {"ActiveState": "activating", "SubState": "start", "NRestarts": "0", "InvocationID": "a"}
ACTIVE = {**RUNNING, "ActiveState": "active", "SubState": "running"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run(states: Iterator[dict[str, str]], answers: Iterator[int | None], timeout: float = 60) -> dict[str, Any]:
    clock = Clock()
    result: dict[str, Any] = module.wait(
        [{"unit": "sglang-30000.service", "url": "http://127.0.0.1:30000"}],
        "/health_generate",
        timeout,
        2,
        state=lambda unit: next(states),
        status=lambda url: next(answers),
        clock=clock,
        sleep=clock.sleep,
    )
    return result


def test_ready_after_refused_connections_and_503() -> None:
    result = run(iter([RUNNING] * 3 + [ACTIVE] * 2), iter([None, 503, 200]))
    assert result == {"ready": {"sglang-30000.service": 4.0}}


def test_fails_fast_when_systemd_restarts_the_unit() -> None:
    restarted = {**RUNNING, "SubState": "auto-restart", "ExecMainStatus": "1"}
    result = run(iter([RUNNING, RUNNING, restarted]), iter([None, None]))
    assert result["failed"] == "sglang-30000.service"
    assert "status 1" in str(result["reason"])


def test_fails_fast_when_the_unit_failed() -> None:
    failed = {**RUNNING, "ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "2"}
    result = run(iter([RUNNING, failed]), iter([]))
    assert "failed" in str(result["reason"]) and "exited with status 2" in str(result["reason"])


def test_a_process_that_killed_itself_is_reported_by_its_signal() -> None:
    killed = {**RUNNING, "SubState": "auto-restart", "ExecMainCode": "2", "ExecMainStatus": "9"}
    result = run(iter([RUNNING, killed]), iter([None]))
    assert result["reason"] == "process was killed by signal 9 (SIGKILL) and systemd is restarting it"


def test_a_restart_between_polls_is_noticed() -> None:
    result = run(iter([RUNNING, {**RUNNING, "NRestarts": "1", "InvocationID": "b"}]), iter([]))
    assert "restarted" in str(result["reason"])


def test_times_out_with_the_last_answer() -> None:
    result = run(iter([RUNNING] * 100), iter([503] * 100), timeout=10)
    assert "not ready after 10 s" in str(result["reason"]) and "HTTP 503" in str(result["reason"])
