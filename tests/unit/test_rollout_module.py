"""sglang_rollout: batch restarts, verification, rollback, router membership (with a fake host)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sglang_rollout as module
from ansible.module_utils.sglang_router_client import RouterError

PARAMS = {
    "batch": 1,
    "drain_timeout": 5,
    "timeout": 60,
    "interval": 1,
    "probe_tokens": 256,
    "min_accept_length": 1.0,
    "journal_lines": 5,
}


@pytest.fixture
def params(tmp_path: Path) -> dict[str, Any]:
    """The module's parameters, its directories in tmp_path."""
    return {**PARAMS, "unit_dir": str(tmp_path), "env_dir": str(tmp_path), "last_good_dir": str(tmp_path / "last-good")}


EAGLE = {"reported_algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def instance(port: int, tmp_path: Path | None = None) -> dict[str, Any]:
    """An instance; with tmp_path, its new unit and environment files there, and last verified copies."""
    if tmp_path:
        (tmp_path / "last-good").mkdir(exist_ok=True)
        for suffix in (".service", ".env"):
            (tmp_path / f"sglang-{port}{suffix}").write_text("new")
            (tmp_path / "last-good" / f"sglang-{port}{suffix}").write_text("previous")
    return {"name": f"sglang-{port}", "unit": f"sglang-{port}.service", "url": f"http://127.0.0.1:{port}", "speculative": EAGLE}


class FakeRouter:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def remove(self, url: str) -> None:
        self.log.append(f"router-remove {url.rsplit(':', 1)[1]}")

    def add(self, url: str) -> None:
        self.log.append(f"router-add {url.rsplit(':', 1)[1]}")


class FakeServers:
    """Answers /server_info and /generate like SGLang; `broken` ports misreport their speculative settings."""

    def __init__(self, log: list[str], broken: set[int] = frozenset(), accept: float | None = 2.5) -> None:  # type: ignore[assignment]
        self.log, self.broken, self.accept = log, set(broken), accept
        self.generated: set[int] = set()

    def __call__(self, url: str, payload: dict[str, Any] | None = None, **_: Any) -> Any:
        port = int(url.split(":")[2].split("/")[0])
        if url.endswith("/generate"):
            self.generated.add(port)
            return {
                "text": "x",
                "meta_info": {"completion_tokens": payload["sampling_params"]["max_new_tokens"] if payload else 0},
            }
        algorithm = None if port in self.broken else "EAGLE"
        state = {"avg_spec_accept_length": self.accept} if port in self.generated and self.accept is not None else {}
        return {"speculative_algorithm": algorithm, "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4, "internal_states": [state]}  # fmt: skip


def fake_host(log: list[str], servers: FakeServers, router: bool = True) -> module.Host:
    clock = [0.0]

    def wait_ready(batch: list[dict[str, Any]], *_: Any) -> dict[str, Any]:
        log.append("ready " + ",".join(i["name"] for i in batch))
        return {"ready": {i["unit"]: 3.0 for i in batch}}

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return module.Host(
        systemctl=lambda *args: log.append(" ".join(args)) if args[0] != "daemon-reload" else None,
        wait_ready=wait_ready,
        get_json=servers,
        journal=lambda unit, lines, since=None: f"journal of {unit}",
        router=FakeRouter(log) if router else None,
        running=lambda url: 0,
        sleep=sleep,
        clock=lambda: clock[0],
    )


def test_one_at_a_time_out_of_and_back_into_the_router(params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log)), [instance(30000), instance(30001)], params)
    assert list(result["restarted"]) == ["sglang-30000", "sglang-30001"]
    assert log == [
        "router-remove 30000", "restart sglang-30000.service", "ready sglang-30000", "router-add 30000",
        "router-remove 30001", "restart sglang-30001.service", "ready sglang-30001", "router-add 30001",
    ]  # fmt: skip
    assert result["restarted"]["sglang-30001"]["verified"] == "256 tokens, accept length 2.50"


def test_batches_restart_together(params: dict[str, Any]) -> None:
    log: list[str] = []
    module.rollout(
        fake_host(log, FakeServers(log), router=False), [instance(p) for p in (30000, 30001, 30002)], {**params, "batch": 2}
    )
    assert log == [
        "restart sglang-30000.service", "restart sglang-30001.service", "ready sglang-30000,sglang-30001",
        "restart sglang-30002.service", "ready sglang-30002",
    ]  # fmt: skip


def test_speculative_mismatch_rolls_back_and_stops(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    instances = [instance(30000, tmp_path), instance(30001, tmp_path), instance(30002, tmp_path)]
    result = module.rollout(fake_host(log, FakeServers(log, broken={30001})), instances, params)
    assert result["failed"] == "sglang-30001"
    assert "speculative_algorithm=None, expected 'EAGLE'" in result["reason"]
    assert "the previous configuration is serving again" in result["rollback"]["sglang-30001"]
    assert (tmp_path / "sglang-30001.service").read_text() == "previous"
    assert (tmp_path / "sglang-30002.service").read_text() == "previous", "not attempted: its verified files are back"
    assert (tmp_path / "sglang-30002.env").read_text() == "previous"
    assert result["not_attempted"] == ["sglang-30002"]
    assert result["journal"] == "journal of sglang-30001.service"
    assert log[-3:] == ["restart sglang-30001.service", "ready sglang-30001", "router-add 30001"]
    assert (tmp_path / "last-good" / "sglang-30000.service").read_text() == "new", "a verified instance's files are kept"
    assert (tmp_path / "last-good" / "sglang-30002.service").read_text() == "previous"


def test_speculative_that_never_engages_fails(params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log, accept=None)), [instance(30000)], params)
    assert "did not engage" in result["reason"]
    assert "no verified configuration to restore" in result["rollback"]["sglang-30000"]


@pytest.mark.parametrize("accept", [1.0, 0.5])
def test_accept_length_must_exceed_the_minimum(accept: float, params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log, accept=accept)), [instance(30000)], params)
    assert "is not above 1.0" in result["reason"]


def test_failed_start_is_reported_with_its_reason(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    host = fake_host(log, FakeServers(log), router=False)
    calls: Iterator[dict[str, Any]] = iter(
        [{"failed": "sglang-30000.service", "reason": "unit is failed"}, {"ready": {"sglang-30000.service": 1.0}}]
    )
    host.wait_ready = lambda *_: next(calls)
    result = module.rollout(host, [instance(30000, tmp_path)], params)
    assert result["reason"] == "sglang-30000.service: unit is failed"
    assert "serving again" in result["rollback"]["sglang-30000"]


def test_a_failed_key_change_rolls_back_to_the_previous_key(tmp_path: Path, params: dict[str, Any]) -> None:
    """The key file is part of the verified set: restored with the unit and the environment file."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    params = {**params, "secrets_dir": str(secrets)}
    servers = [instance(30000, tmp_path), instance(30001, tmp_path)]
    (secrets / "sglang-30000.yaml").write_text("api-key: new")
    (tmp_path / "last-good" / "sglang-30000.yaml").write_text("api-key: previous")
    (secrets / "sglang-30001.yaml").write_text("api-key: added")  # the last verified set had no key
    log: list[str] = []
    for server in servers:
        result = module.rollout(fake_host(log, FakeServers(log, broken={30000, 30001}), router=False), [server], params)
        assert "serving again" in result["rollback"][server["name"]]
    assert (secrets / "sglang-30000.yaml").read_text() == "api-key: previous"
    assert not (secrets / "sglang-30001.yaml").exists(), "a key the verified set did not have is removed"


def test_a_verified_instance_keeps_its_key_file_in_the_set(tmp_path: Path, params: dict[str, Any]) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "sglang-30000.yaml").write_text("api-key: new")
    (tmp_path / "last-good").mkdir()
    (tmp_path / "last-good" / "sglang-30001.yaml").write_text("api-key: stale")
    params = {**params, "secrets_dir": str(secrets)}
    log: list[str] = []
    module.rollout(fake_host(log, FakeServers(log), router=False), [instance(30000), instance(30001)], params)
    assert (tmp_path / "last-good" / "sglang-30000.yaml").read_text() == "api-key: new"
    assert not (tmp_path / "last-good" / "sglang-30001.yaml").exists(), "no key now: none in the verified set"


@pytest.mark.parametrize(("status", "router"), [(None, False), (401, None), (403, None), (500, None)])
def test_a_router_refusing_the_key_stops_the_rollout_instead_of_skipping_the_drain(
    monkeypatch: pytest.MonkeyPatch, status: int | None, router: bool | None
) -> None:
    def refuse(*_: Any, **__: Any) -> list[dict[str, Any]]:
        raise RouterError("GET /workers: HTTP", status)

    monkeypatch.setattr("sglang_rollout.sglang_router_client.list_workers", refuse)
    if router is False:
        assert module.router_for("http://127.0.0.1:30100", "key") is None, "nothing answers: no router yet"
        return
    with pytest.raises(module.RolloutError, match=f"HTTP {status}"):
        module.router_for("http://127.0.0.1:30100", "key")


def test_workers_are_managed_with_the_key_the_running_router_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key rotation: workers rejoin with the new key, through a router that still runs with the old one."""
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "environ").write_bytes(b"HOME=/var/lib/sglang\0SGLANG_API_KEY=old-key\0NO_COLOR=1\0")
    shown = type("Shown", (), {"stdout": "4242\n"})
    monkeypatch.setattr("sglang_rollout.subprocess.run", lambda *_, **__: shown)
    assert module.running_key("sglang-router.service", proc=str(tmp_path)) == "old-key"
    seen: list[str] = []

    def list_workers(url: str, api_key: str) -> list[dict[str, Any]]:
        seen.append(api_key)
        return []

    monkeypatch.setattr("sglang_rollout.sglang_router_client.list_workers", list_workers)
    router = module.router_for("http://127.0.0.1:30100", "new-key", "old-key")
    assert router is not None and seen == ["old-key"]
    assert (router.api_key, router.worker_api_key) == ("old-key", "new-key")
