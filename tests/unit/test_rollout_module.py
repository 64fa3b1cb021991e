"""sglang_rollout: batch restarts, verification, rollback, router membership (with a fake host)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import sglang_router_client
from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_router_client import RouterError
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout as module

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
def params() -> dict[str, Any]:
    """The module's parameters."""
    return dict(PARAMS)


EAGLE = {"reported_algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def instance(port: int, tmp_path: Path, written: bool = False, keys: bool = False) -> dict[str, Any]:
    """An instance whose files the plan puts in tmp_path (its key file in tmp_path/secrets, with `keys`); `written`:
    its new unit and environment files are there, and last verified copies."""
    if written:
        (tmp_path / "last-good").mkdir(exist_ok=True)
        for suffix in (".service", ".env"):
            (tmp_path / f"sglang-{port}{suffix}").write_text("new")
            (tmp_path / "last-good" / f"sglang-{port}{suffix}").write_text("previous")
    unit = f"sglang-{port}.service"
    files = instance_files(unit, str(tmp_path), str(tmp_path), str(tmp_path / "secrets") if keys else "")
    return {"name": f"sglang-{port}", "unit": unit, "url": f"http://127.0.0.1:{port}", "speculative": EAGLE, "files": files}


class FakeRouter:
    def __init__(self, log: list[str], name: str = "router", worker_url: str = "url") -> None:
        self.log, self.name, self.worker_url = log, name, worker_url

    def remove(self, url: str) -> None:
        self.log.append(f"{self.name}-remove {url.rsplit(':', 1)[1]}")

    def add(self, url: str, model_id: str = "") -> None:
        self.log.append(f"{self.name}-add {url.rsplit(':', 1)[1]}")


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
        routers=[FakeRouter(log)] if router else [],
        running=lambda url: 0,
        metrics=lambda url: None,
        sleep=sleep,
        clock=lambda: clock[0],
        now=lambda: clock[0],
    )


def test_one_at_a_time_out_of_and_back_into_the_router(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log)), [instance(30000, tmp_path), instance(30001, tmp_path)], params)
    assert list(result["restarted"]) == ["sglang-30000", "sglang-30001"]
    assert log == [
        "router-remove 30000", "restart sglang-30000.service", "ready sglang-30000", "router-add 30000",
        "router-remove 30001", "restart sglang-30001.service", "ready sglang-30001", "router-add 30001",
    ]  # fmt: skip
    assert result["restarted"]["sglang-30001"]["verified"] == "256 tokens, accept length 2.50"


def test_every_router_and_gateway_takes_the_instance_out_and_back_by_the_url_it_knows(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """A fleet gateway on another host knows the worker by its remote URL; the host's router by its loopback URL.
    Both take it out before the restart and back after verification, and the drain waits once."""
    log: list[str] = []
    host = fake_host(log, FakeServers(log))
    host.routers.append(FakeRouter(log, "gateway", "remote_url"))
    server = {**instance(30000, tmp_path), "remote_url": "http://b200:40000"}
    module.rollout(host, [server], params)
    assert log == ["router-remove 30000", "gateway-remove 40000", "restart sglang-30000.service", "ready sglang-30000",
                   "router-add 30000", "gateway-add 40000"]  # fmt: skip


class RefusingGateway(FakeRouter):
    """A gateway that cannot take the worker back (it cannot reach it)."""

    def add(self, url: str, model_id: str = "") -> None:
        self.log.append(f"{self.name}-add {url.rsplit(':', 1)[1]} refused")
        raise sglang_router_client.RouterError("does not list it as healthy")


def test_a_failed_gateway_rejoin_rolls_back_only_after_taking_the_instance_out_of_every_router_again(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    log: list[str] = []
    host = fake_host(log, FakeServers(log))
    host.routers.append(RefusingGateway(log, "gateway", "remote_url"))
    server = {**instance(30000, tmp_path, written=True), "remote_url": "http://b200:40000"}
    result = module.rollout(host, [server], params)
    assert result["failed_instance"] == "sglang-30000"
    first_rejoin = log.index("router-add 30000")
    assert log[first_rejoin + 1 :] == [
        "gateway-add 40000 refused",
        "router-remove 30000", "gateway-remove 40000", "restart sglang-30000.service", "ready sglang-30000",
        "router-add 30000", "gateway-add 40000 refused",
    ]  # fmt: skip


class RouterWithoutTheCA(FakeRouter):
    """A router that cannot verify a worker over https (it was started without the instances' CA)."""

    def remove(self, url: str) -> None:
        self.log.append(f"{self.name}-remove {url}")

    def add(self, url: str, model_id: str = "") -> None:
        self.log.append(f"{self.name}-add {url}")
        if url.startswith("https://"):
            raise sglang_router_client.RouterError("does not list it as healthy")


def unit(*argv: str) -> str:
    return "[Service]\nExecStartPre=/bin/true\nExecStart=" + " ".join(["/usr/bin/python3", "launcher.py", *argv]) + "\n"


def test_a_failed_switch_to_https_waits_on_and_routes_the_plain_instance_it_restores(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """The run that turns TLS on: the routers know the running instance by its plain URL (its last verified unit's), so
    it leaves them by that URL; when the https one fails, the rollback restores the plain files and waits for and puts
    back the plain URL, never the failed https one (which it would wait on until the timeout). Only into the routers on
    its own host: the fleet gateway on another host would reach it, with its key and users' prompts, across the network
    in the clear, so it does not take it back, and the rollback's outcome says so."""
    log: list[str] = []
    host = fake_host(log, FakeServers(log))
    host.routers = [RouterWithoutTheCA(log), RouterWithoutTheCA(log, "gateway", "remote_url")]

    def wait_ready(batch: list[dict[str, Any]], *_: Any) -> dict[str, Any]:
        log.append("ready " + ",".join(instance["url"] for instance in batch))
        return {"ready": {instance["unit"]: 3.0 for instance in batch}}

    host.wait_ready = wait_ready
    server = {**instance(30000, tmp_path, written=True), "url": "https://127.0.0.1:30000", "remote_url": "https://b200:30000"}
    (tmp_path / "sglang-30000.service").write_text(unit("--port", "30000", "--ssl-certfile", "/s/tls.pem"))
    (tmp_path / "last-good" / "sglang-30000.service").write_text(unit("--port", "30000"))
    result = module.rollout(host, [server], params)
    assert result["failed_instance"] == "sglang-30000" and "serving again" in result["rollback"]["sglang-30000"]
    assert result["rollback"]["sglang-30000"].endswith("the next deploy that serves it over https adds it back")
    assert log == [
        "router-remove http://127.0.0.1:30000", "gateway-remove http://b200:30000",
        "restart sglang-30000.service", "ready https://127.0.0.1:30000", "router-add https://127.0.0.1:30000",
        "router-remove https://127.0.0.1:30000", "gateway-remove https://b200:30000",
        "restart sglang-30000.service", "ready http://127.0.0.1:30000", "router-add http://127.0.0.1:30000",
    ]  # fmt: skip
    assert "--ssl-certfile" not in (tmp_path / "sglang-30000.service").read_text(), "the plain unit restored"
    # Every node of an instance across hosts, rolled back together, likewise; a reshape's stop leaves by the plain URL.
    (tmp_path / "sglang-30000.service").write_text(unit("--port", "30000", "--ssl-certfile", "/s/tls.pem"))
    del log[:]
    outcomes = module.roll_back_nodes(host, [server], params)
    assert log == ["restart sglang-30000.service", "ready http://127.0.0.1:30000", "router-add http://127.0.0.1:30000"]
    assert outcomes["sglang-30000"].endswith("the next deploy that serves it over https adds it back")
    del log[:]
    module.stop(host, [server], params)
    assert log == ["router-remove http://127.0.0.1:30000", "gateway-remove http://b200:30000", "stop sglang-30000.service"]


def test_a_reshape_stop_drains_each_instance_out_of_the_router_first(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    stopped = module.stop(fake_host(log, FakeServers(log)), [instance(30001, tmp_path), instance(30002, tmp_path)], params)
    assert stopped == ["sglang-30001", "sglang-30002"]
    assert log == [
        "router-remove 30001", "stop sglang-30001.service", "router-remove 30002", "stop sglang-30002.service",
    ]  # fmt: skip


def test_batches_restart_together(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    module.rollout(
        fake_host(log, FakeServers(log), router=False),
        [instance(p, tmp_path) for p in (30000, 30001, 30002)],
        {**params, "batch": 2},
    )
    assert log == [
        "restart sglang-30000.service", "restart sglang-30001.service", "ready sglang-30000,sglang-30001",
        "restart sglang-30002.service", "ready sglang-30002",
    ]  # fmt: skip


def test_speculative_mismatch_rolls_back_and_stops(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    instances = [instance(port, tmp_path, written=True) for port in (30000, 30001, 30002)]
    result = module.rollout(fake_host(log, FakeServers(log, broken={30001})), instances, params)
    assert result["failed_instance"] == "sglang-30001"
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


def test_speculative_that_never_engages_fails(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log, accept=None)), [instance(30000, tmp_path)], params)
    assert "did not engage" in result["reason"]
    assert "no verified configuration to restore" in result["rollback"]["sglang-30000"]


@pytest.mark.parametrize("accept", [1.0, 0.5])
def test_accept_length_must_exceed_the_minimum(accept: float, tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    result = module.rollout(fake_host(log, FakeServers(log, accept=accept)), [instance(30000, tmp_path)], params)
    assert "is not above 1.0" in result["reason"]


def test_failed_start_is_reported_with_its_reason(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    host = fake_host(log, FakeServers(log), router=False)
    calls: Iterator[dict[str, Any]] = iter(
        [{"failed": "sglang-30000.service", "reason": "unit is failed"}, {"ready": {"sglang-30000.service": 1.0}}]
    )
    host.wait_ready = lambda *_: next(calls)
    result = module.rollout(host, [instance(30000, tmp_path, written=True)], params)
    assert result["reason"] == "sglang-30000.service: unit is failed"
    assert "serving again" in result["rollback"]["sglang-30000"]


def test_a_failed_key_change_rolls_back_to_the_previous_key(tmp_path: Path, params: dict[str, Any]) -> None:
    """The key file is part of the verified set: restored with the unit and the environment file."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    servers = [instance(30000, tmp_path, written=True, keys=True), instance(30001, tmp_path, written=True, keys=True)]
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
    log: list[str] = []
    servers = [instance(30000, tmp_path, keys=True), instance(30001, tmp_path, keys=True)]
    module.rollout(fake_host(log, FakeServers(log), router=False), servers, params)
    assert (tmp_path / "last-good" / "sglang-30000.yaml").read_text() == "api-key: new"
    assert not (tmp_path / "last-good" / "sglang-30001.yaml").exists(), "no key now: none in the verified set"


@pytest.mark.parametrize(("status", "router"), [(None, False), (401, None), (403, None), (500, None)])
def test_a_router_refusing_the_key_stops_the_rollout_instead_of_skipping_the_drain(
    monkeypatch: pytest.MonkeyPatch, status: int | None, router: bool | None
) -> None:
    def refuse(*_: Any, **__: Any) -> list[dict[str, Any]]:
        raise RouterError("GET /workers: HTTP", status)

    monkeypatch.setattr(sglang_router_client, "list_workers", refuse)
    if router is False:
        assert module.router_for("http://127.0.0.1:30100", ["admin-key"]) is None, "nothing answers: no router yet"
        return
    with pytest.raises(module.RolloutError, match=f"HTTP {status}"):
        module.router_for("http://127.0.0.1:30100", ["admin-key", "client-key"])


def test_workers_are_managed_with_the_admin_key_the_running_router_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client-key rotation: workers rejoin with the new client key, through the router's admin key, which the
    rotation leaves alone; the admin key in the running router's keys file comes first."""
    keys_file = tmp_path / "router.json"
    keys_file.write_text('{"api_key": "old-client-key", "admin_key": "held-admin-key"}')
    seen: list[str] = []

    def list_workers(url: str, api_key: str, ca_file: str = "") -> list[dict[str, Any]]:
        seen.append(api_key)
        if api_key != "held-admin-key":
            raise RouterError("GET /workers: HTTP 401", 401)
        return []

    monkeypatch.setattr(sglang_router_client, "list_workers", list_workers)
    keys = module.router_keys(str(keys_file), "new-admin-key", "new-client-key")
    assert keys == ["held-admin-key", "new-admin-key", "new-client-key"]
    router = module.router_for("http://127.0.0.1:30100", keys, "new-client-key")
    assert router is not None and seen == ["held-admin-key"]
    assert (router.api_key, router.worker_api_key) == ("held-admin-key", "new-client-key")


def test_a_keys_file_the_router_was_not_restarted_with_falls_back_to_the_next_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that wrote a new admin key and stopped before restarting the router; or a router of an earlier release
    (no admin key, --api-key only: the client key unlocks /workers)."""
    keys_file = tmp_path / "router.json"
    keys_file.write_text('{"api_key": "client-key", "admin_key": "unused-admin-key"}')
    seen: list[str] = []

    def list_workers(url: str, api_key: str, ca_file: str = "") -> list[dict[str, Any]]:
        seen.append(api_key)
        if api_key != "client-key":
            raise RouterError("GET /workers: HTTP 401", 401)
        return []

    monkeypatch.setattr(sglang_router_client, "list_workers", list_workers)
    keys = module.router_keys(str(keys_file), "admin-key", "client-key")
    router = module.router_for("http://127.0.0.1:30100", keys, "client-key")
    assert router is not None and router.api_key == "client-key"
    assert seen == ["unused-admin-key", "admin-key", "client-key"]


def test_router_keys_without_a_keys_file_or_any_key(tmp_path: Path) -> None:
    assert module.router_keys(str(tmp_path / "missing.json"), "admin-key", "client-key") == ["admin-key", "client-key"]
    (tmp_path / "broken.json").write_text("{")
    assert module.router_keys(str(tmp_path / "broken.json"), "admin-key", "admin-key") == ["admin-key"]
    assert module.router_keys("", "", "") == [""], "a router without keys is asked without one"


def test_a_router_refusing_every_key_stops_the_rollout_with_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(url: str, api_key: str, ca_file: str = "") -> list[dict[str, Any]]:
        raise RouterError("GET /workers: HTTP 401", 401)

    monkeypatch.setattr(sglang_router_client, "list_workers", refuse)
    refused = r"refuses the fleet's admin key on /workers \(HTTP 401\).*sglang_router_admin_key"
    with pytest.raises(module.RolloutError, match=refused):
        module.router_for("http://127.0.0.1:30100", ["admin-key", "client-key"], "client-key")


class Exited(Exception):
    """What the fake AnsibleModule raises on exit_json / fail_json, with the result."""


def test_the_module_manages_the_router_with_its_admin_key_and_stops_when_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_file = tmp_path / "router.json"
    keys_file.write_text('{"api_key": "old-client-key", "admin_key": "held-admin-key"}')
    params = {
        "instances": [instance(30000, tmp_path)],
        "router_url": "http://127.0.0.1:30100",
        "router_admin_key": "admin-key",
        "router_keys_file": str(keys_file),
        "api_key": "new-client-key",
    }

    class FakeModule:
        check_mode = False

        def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
            assert argument_spec["router_admin_key"]["no_log"] is True and argument_spec["api_key"]["no_log"] is True
            self.params = {name: spec.get("default") for name, spec in argument_spec.items()} | params

        def exit_json(self, **result: Any) -> None:
            raise Exited({"failed": False, **result})

        def fail_json(self, **result: Any) -> None:
            raise Exited({"failed": True, **result})

    asked: list[str] = []

    def refuse(url: str, api_key: str, ca_file: str = "") -> list[dict[str, Any]]:
        asked.append(api_key)
        raise RouterError("GET /workers: HTTP 401", 401)

    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", FakeModule)
    monkeypatch.setattr(sglang_router_client, "list_workers", refuse)
    with pytest.raises(Exited) as exited:
        module.main()
    result = exited.value.args[0]
    assert asked == ["held-admin-key", "admin-key", "new-client-key"], "the running router's admin key first"
    assert result["failed"] and result["msg"].startswith("Rollout not started: the router at http://127.0.0.1:30100 refuses")
    assert result["not_attempted"] == ["sglang-30000"] and result["changed"] is False


def test_a_router_an_earlier_release_started_is_managed_with_its_one_key(tmp_path: Path) -> None:
    """Upgrading: that router took --api-key from router.env (which also unlocked /workers); the rollout runs first."""
    (tmp_path / "router.env").write_text('#\n# Managed by Ansible\n#\nSGLANG_API_KEY="sk-old \\"quoted\\""\n')
    keys = module.router_keys(str(tmp_path / "router.json"), "admin-new", "")
    assert keys == ['sk-old "quoted"', "admin-new"]


RECORDED_METRICS = Path(__file__).resolve().parents[1] / "recordings/sglang-0.5.17-h200-fleet/nextn/metrics.txt"


def test_each_restarted_instance_reports_its_start_up_and_the_rollouts_stop_to_verified(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """Issue 42: SGLang's own start-up gauges (as real 0.5.17 exposed them on the H200) and the rollout's own seconds
    from the restart to verified, per instance."""
    log: list[str] = []
    host = fake_host(log, FakeServers(log))
    clock = [100.0]

    def now() -> float:
        clock[0] += 7.0
        return clock[0]

    host.now = now
    host.metrics = lambda url: RECORDED_METRICS.read_text() if url.endswith(":30000") else None
    result = module.rollout(host, [instance(30000, tmp_path), instance(30001, tmp_path)], params)
    first, second = result["restarted"]["sglang-30000"], result["restarted"]["sglang-30001"]
    assert first["startup"] == {
        "total": 26.32, "weight_load": 0.17, "kv_cache_allocation": 1.72, "cuda_graph": 0.0, "scheduler": 5.02,
        "weight_update": None, "weight_update_source": None,
    }  # fmt: skip
    assert first["stop_to_verified_seconds"] == 14.0, "restart at one tick, ready the next, verified the one after"
    assert second["startup"] == {}, "no --enable-metrics: no figures, and nothing fails"


class PerPortServers(FakeServers):
    """FakeServers whose accept length is per port (the canary's own, the peers' another); `failing` ports answer
    probe generations with an error."""

    def __init__(self, log: list[str], accepts: dict[int, float], failing: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__(log)
        self.accepts, self.failing = accepts, set(failing)

    def __call__(self, url: str, payload: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        port = int(url.split(":")[2].split("/")[0])
        if url.endswith("/generate") and port in self.failing and payload and "canary" in payload["text"]:
            raise OSError("HTTP 500")
        self.accept = self.accepts.get(port, 2.5)
        self.generated.add(port)
        return super().__call__(url, payload, **kwargs)


def canary_params(params: dict[str, Any]) -> dict[str, Any]:
    return {**params, "canary_seconds": 10, "canary_max_regression": 0.2, "canary_peers": {"qwen": ["http://127.0.0.1:30001"]}}


def canary(port: int, tmp_path: Path) -> dict[str, Any]:
    return {**instance(port, tmp_path, written=True), "served_model_name": "qwen"}


def test_a_canary_whose_accept_length_drops_below_its_peers_is_rolled_back_and_the_later_waves_keep_their_files(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    log: list[str] = []
    later = canary(30001, tmp_path)
    host = fake_host(log, PerPortServers(log, {30000: 1.6, 30001: 3.2}))
    result = module.rollout(host, [canary(30000, tmp_path)], {**canary_params(params), "later": [later]})
    assert result["failed_instance"] == "sglang-30000"
    assert "the canary regressed over 10 s against 1 peer(s)" in result["reason"]
    assert "avg_spec_accept_length 1.60 is more than 20% below the peers' 3.20" in result["reason"]
    assert "the previous configuration is serving again" in result["rollback"]["sglang-30000"]
    assert (tmp_path / "sglang-30000.service").read_text() == "previous"
    assert (tmp_path / "last-good" / "sglang-30000.service").read_text() == "previous", "never kept as verified"
    assert result["not_attempted"] == ["sglang-30001"]
    assert (tmp_path / "sglang-30001.service").read_text() == "previous", "a later wave's verified files are back"
    assert "restart sglang-30001.service" not in log


def test_a_canary_within_the_threshold_is_kept_with_its_figures(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    host = fake_host(log, PerPortServers(log, {30000: 2.9, 30001: 3.2}))
    result = module.rollout(host, [canary(30000, tmp_path)], canary_params(params))
    assert "failed" not in result
    assert result["restarted"]["sglang-30000"]["verified"].endswith(
        "; canary 10 s: 10/10 probes answered, accept length 2.90 vs 3.20"
    )
    assert (tmp_path / "last-good" / "sglang-30000.service").read_text() == "new"


def test_a_canary_whose_probes_fail_is_rolled_back(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    host = fake_host(log, PerPortServers(log, {}, failing={30000}))
    result = module.rollout(host, [canary(30000, tmp_path)], canary_params(params))
    assert "10 of 10 probe generations failed" in result["reason"]


def test_a_canary_slower_to_the_first_token_than_its_peers_is_rolled_back(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    host = fake_host(log, PerPortServers(log, {}))
    readings = {"30000": iter([(1.0, 10), (6.0, 20)]), "30001": iter([(1.0, 10), (2.0, 20)])}

    def metrics(url: str) -> str:
        total, count = next(readings[url.rsplit(":", 1)[1]])
        return (
            "# TYPE sglang:time_to_first_token_seconds histogram\n"
            f'sglang:time_to_first_token_seconds_sum{{model_name="qwen"}} {total}\n'
            f'sglang:time_to_first_token_seconds_count{{model_name="qwen"}} {count}\n'
        )

    host.metrics = metrics
    result = module.rollout(host, [canary(30000, tmp_path)], canary_params(params))
    assert "mean time to first token 0.500 s is more than 20% above the peers' 0.100 s" in result["reason"]


def test_a_rollout_halted_by_another_hosts_failure_restarts_nothing_and_puts_the_verified_files_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []

    def init(self: module.Host, **_: Any) -> None:
        self.systemctl = calls.append

    monkeypatch.setattr(module.Host, "__init__", init)

    class Failed(Exception):
        pass

    class FakeModule:
        def __init__(self, argument_spec: dict[str, Any], **_: Any) -> None:
            self.check_mode = False
            self.params = {name: spec.get("default") for name, spec in argument_spec.items()} | {
                "instances": [instance(30000, tmp_path, written=True)],
                "later": [instance(30001, tmp_path, written=True)],
                "halted": "b200 failed: Rollout stopped at sglang-30003",
            }

        def fail_json(self, **result: Any) -> None:
            raise Failed(result)

    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", FakeModule)
    with pytest.raises(Failed) as failed:
        module.main()
    result = failed.value.args[0]
    assert result["msg"] == "Rollout stopped before sglang-30000: b200 failed: Rollout stopped at sglang-30003"
    assert result["not_attempted"] == ["sglang-30000", "sglang-30001"]
    assert (tmp_path / "sglang-30000.service").read_text() == "previous"
    assert (tmp_path / "sglang-30001.env").read_text() == "previous"
    assert calls == ["daemon-reload"]


def test_a_leaving_host_drains_each_instance_before_stopping_it_even_without_a_router_here(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    log: list[str] = []
    host = fake_host(log, FakeServers(log), router=False)
    running = iter([2, 1, 0, 0])

    def asked(url: str) -> float:
        log.append(f"running? {url.rsplit(':', 1)[1]}")
        return next(running)

    host.running = asked
    stopped = module.stop(host, [instance(30000, tmp_path), instance(30001, tmp_path)], {**params, "drain": True})
    assert stopped == ["sglang-30000", "sglang-30001"]
    assert log == [
        "running? 30000", "running? 30000", "running? 30000", "stop sglang-30000.service",
        "running? 30001", "stop sglang-30001.service",
    ]  # fmt: skip
    log.clear()
    module.stop(host, [instance(30002, tmp_path)], params)
    assert log == ["stop sglang-30002.service"], "a reshape without a router does not wait"


def test_a_node_of_rank_1_is_restarted_and_waited_for_but_neither_routed_nor_asked_over_http(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    """An instance across hosts: SGLang serves HTTP at rank 0; another rank answers /health alone (module multinode)."""
    log: list[str] = []
    servers = FakeServers(log)
    node = {**instance(30000, tmp_path), "serves_http": False, "node_rank": 1}
    result = module.rollout(fake_host(log, servers), [node], params)
    assert log == ["restart sglang-30000.service", "ready sglang-30000"]
    assert servers.generated == set()
    assert result["restarted"]["sglang-30000"]["verified"] == "node rank 1: unit running, joined rank 0"


def test_the_nodes_of_an_instance_across_hosts_start_at_once_and_report_a_failure_without_rolling_back(
    tmp_path: Path, params: dict[str, Any]
) -> None:
    log: list[str] = []
    rank0 = {**instance(30000, tmp_path, written=True), "node_rank": 0, "nodes": ["a", "b"]}
    broken = FakeServers(log, broken={30000})
    result = module.start_nodes(fake_host(log, broken), [rank0], params)
    assert result["failed_instance"] == "sglang-30000" and "speculative_algorithm=None" in result["reason"]
    assert "failed" not in result, "Ansible would read it as the task's failure"
    assert result["journal"] == "journal of sglang-30000.service"
    # Neither rolled back nor back in the router: the next task decides for every node.
    assert log == ["router-remove 30000", "restart sglang-30000.service", "ready sglang-30000"]
    assert (tmp_path / "sglang-30000.service").read_text() == "new"


def test_the_nodes_keep_their_files_once_every_node_passed_or_roll_back_together(tmp_path: Path, params: dict[str, Any]) -> None:
    log: list[str] = []
    rank1 = {**instance(30000, tmp_path, written=True), "node_rank": 1, "nodes": ["a", "b"], "serves_http": False}
    host = fake_host(log, FakeServers(log))
    assert module.start_nodes(host, [rank1], params) == {
        "restarted": {"sglang-30000": {"ready_seconds": 3.0, "verified": "node rank 1: unit running, joined rank 0"}}
    }
    # Another node failed: back to the last verified files, restarted, waited for.
    outcome = module.roll_back_nodes(host, [rank1], params)
    assert (tmp_path / "sglang-30000.service").read_text() == "previous"
    assert outcome["sglang-30000"].endswith("; serving again")
    assert log[-2:] == ["restart sglang-30000.service", "ready sglang-30000"]
    # Every node passed: the running files become the verified ones.
    (tmp_path / "sglang-30000.service").write_text("newer")
    assert module.keep_nodes(host, [rank1]) == ["sglang-30000"]
    assert (tmp_path / "last-good" / "sglang-30000.service").read_text() == "newer"


def test_a_failed_rollout_names_its_instance_in_a_key_fail_json_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fail_json sets `failed` to true: the failed instance's name travels as `failed_instance`."""

    class FakeModule:
        check_mode = False

        def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
            self.params = {name: spec.get("default") for name, spec in argument_spec.items()} | {
                "instances": [instance(30000, tmp_path)]
            }

        def exit_json(self, **result: Any) -> None:
            raise Exited({"failed": False, **result})

        def fail_json(self, **result: Any) -> None:
            raise Exited({**result, "failed": True})  # as AnsibleModule: its own `failed` wins

    failed = {"restarted": {}, "failed_instance": "sglang-30000", "failed_at": 1.0, "reason": "no tokens",
              "journal": "", "rollback": {"sglang-30000": "restored"}, "not_attempted": []}  # fmt: skip
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", FakeModule)
    monkeypatch.setattr(module, "rollout", lambda host, instances, params: failed)
    with pytest.raises(Exited) as exited:
        module.main()
    result = exited.value.args[0]
    assert result["failed"] is True and result["failed_instance"] == "sglang-30000"
    assert result["msg"].startswith("Rollout stopped at sglang-30000: no tokens. Rollback: sglang-30000: restored.")


def test_remove_stops_a_leaving_hosts_instances_which_carry_no_files(params: dict[str, Any]) -> None:
    """playbooks/remove.yml hands the rollout the instances found from their units (filter sglang_leaving_instances):
    name, unit and URLs, no `files`. Stopping them leaves the routers by those URLs; it does not fail on the missing
    verified copy."""
    from ansible_collections.sglang.fleet.plugins.module_utils.rollout_plan import leaving_instances

    log: list[str] = []
    host = fake_host(log, FakeServers(log))
    host.routers = [FakeRouter(log), FakeRouter(log, "gateway", "remote_url")]
    leaving = leaving_instances(["/etc/systemd/system/sglang-30000.service"], "0.0.0.0", "b200", tls=True)
    assert "files" not in leaving[0]
    assert module.stop(host, leaving, params) == ["sglang-30000"]
    assert log == ["router-remove 30000", "gateway-remove 30000", "stop sglang-30000.service"]
