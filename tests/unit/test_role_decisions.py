"""What each role of deploy.yml would change, decided in Python from deploy's probe (module_utils/role_decisions.py), and
the probe's action returning every decision as data (answers[role].decision, changes)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.action import sglang_instance_files
from ansible_collections.sglang.fleet.plugins.module_utils import role_decisions
from ansible_collections.sglang.fleet.plugins.module_utils.instance_files import instance_files

STARTED = "Thu 1970-01-01 00:16:40.000000 UTC"  # 1000 s


def instance(port: int, secret: bool = False) -> dict[str, Any]:
    unit = f"sglang-{port}.service"
    return {
        "name": f"sglang-{port}",
        "unit": unit,
        "files": instance_files(unit, "/etc/systemd/system", "/etc/sglang-fleet", "/etc/sglang-fleet/secrets", keyed=secret),
    }


def server_answer(**states: str) -> dict[str, Any]:
    """A converged host's answer for the server's request, with the units' ActiveState as given (others active)."""
    units = {
        unit: {"ActiveState": state, "UnitFileState": "enabled", "ExecMainStartTimestamp": STARTED}
        for unit, state in {"sglang-nvidia-devices.service": "active", **states}.items()
    }
    return {
        "changed_paths": [],
        "read": {
            "differences": [],
            "found": {
                "/etc/sglang-fleet/secrets/sglang-*.yaml": [],
                "/etc/systemd/system/sglang-*.service": [f"/etc/systemd/system/{unit}" for unit in states],
            },
            "units": units,
            "mtimes": {},
        },
    }


SERVER = {
    "unit_dir": "/etc/systemd/system",
    "secrets_dir": "/etc/sglang-fleet/secrets",
    "devices_unit": "sglang-nvidia-devices.service",
    "displaced": [],
}


def test_a_converged_server_host_has_nothing_to_change() -> None:
    instances = [instance(30000), instance(30001)]
    answer = server_answer(**{"sglang-30000.service": "active", "sglang-30001.service": "active"})
    decision = role_decisions.sglang_server({**SERVER, "instances": instances}, answer)
    assert decision["changes"] == [] and not decision["configure"] and decision["to_check"] == []


def test_the_server_decision_names_every_change_in_deploy_s_words_and_order() -> None:
    instances = [instance(30000, secret=True), instance(30001), instance(30002)]
    answer = server_answer(
        **{"sglang-30000.service": "active", "sglang-30001.service": "failed", "sglang-30007.service": "active"}
    )
    answer["read"]["units"]["sglang-nvidia-devices.service"]["UnitFileState"] = "disabled"
    answer["read"]["units"]["sglang-30000.service"]["UnitFileState"] = "disabled"
    answer["read"]["differences"] = ["user sglang: primary group is not sglang"]
    answer["read"]["found"]["/etc/sglang-fleet/secrets/sglang-*.yaml"] = [
        "/etc/sglang-fleet/secrets/sglang-30000.yaml",  # the key of a planned instance
        "/etc/sglang-fleet/secrets/sglang-30009.yaml",  # of none
        "/etc/sglang-fleet/secrets/sglang-notes.yaml",  # not the fleet's name
    ]
    answer["read"]["mtimes"] = {"/etc/sglang-fleet/sglang-30000.env": 1001.0}
    answer["changed_paths"] = ["/etc/systemd/system/sglang-30002.service"]
    answer["changed_instances"] = ["sglang-30002"]
    decision = role_decisions.sglang_server({**SERVER, "instances": instances, "displaced": ["sglang-30001.service"]}, answer)
    assert decision["changes"] == [
        "user sglang: primary group is not sglang",
        "/etc/systemd/system/sglang-30002.service",
        "/etc/sglang-fleet/secrets/sglang-30009.yaml",
        "sglang-30007.service",
        "sglang-nvidia-devices.service: not running",
        "sglang-30001.service: displaced",
        "sglang-30000.service: stale",
        "sglang-30001.service: not running",
        "sglang-30002.service: not running",
        "sglang-30000.service: not enabled",
        "sglang-30002.service: not enabled",
    ]
    assert decision["configure"] and decision["unplanned_units"] == ["sglang-30007.service"]
    assert decision["failed_units"] == ["sglang-30001.service"]
    assert [i["name"] for i in decision["to_check"]] == ["sglang-30002", "sglang-30001"], "changed first, then stopped"


def test_the_runtime_parses_once_and_keeps_its_marker_only_when_nothing_is_to_install() -> None:
    settings = {"venv": "/opt/sglang/sglang-0.5.23", "venvs": "/opt/sglang/sglang-*", "keep_previous": 1,
                "checker": "/opt/sglang/sglang-0.5.23/check_server_args.py"}  # fmt: skip
    marker = "/opt/sglang/sglang-0.5.23/.parsed-abc"
    found = {settings["checker"]: [settings["checker"]], marker: [], settings["venvs"]: [settings["venv"]]}
    answer = {"read": {"differences": [], "differing_paths": [], "found": found}}
    first = role_decisions.sglang_venv(settings, answer)
    assert first["parse"] and first["marks_parsed"] and first["installed"]
    assert first["changes"] == ["the marker that the runtime parsed these command lines: to write"]
    found[marker] = [marker]
    assert role_decisions.sglang_venv(settings, answer)["changes"] == [], "parsed before: a no-op"
    answer["read"]["differences"] = ["package x is not installed"]
    answer["read"]["differing_paths"] = [settings["checker"]]
    found[settings["venvs"]] += ["/opt/sglang/sglang-0.5.17", "/opt/sglang/sglang-0.5.9"]
    changed = role_decisions.sglang_venv(settings, answer)
    assert not changed["parse"] and changed["install"] and changed["prunable"]
    assert changed["changes"] == ["package x is not installed", "previous venvs beyond sglang_venv_keep_previous"]
    assert role_decisions.sglang_venv(settings, {"read": {}})["installed"] is False, "an unknown runtime reads nothing"


def test_the_model_sends_what_the_host_lacks_and_prunes_beyond_the_kept_revisions() -> None:
    source = {"path": "/m/r3", "link": "/m/current", "files": {"a": {"size": 4}, "b": {"size": 4}}}
    on_host = {
        "exists": True,
        "checksum_problems": {"b": "missing"},
        "link_target": "/m/r2",
        "verified": {},
        "revisions": [{"path": "/m/r1", "mtime": 1}, {"path": "/m/r2", "mtime": 2}, {"path": "/m/r3", "mtime": 3}],
    }
    settings = {"model": {"repo": "q"}, "source": source, "on_host": on_host, "keep_previous": 1}
    decision = role_decisions.sglang_model(settings, {})
    assert decision["changes"] == ["/m/r3/b", "/m/current: to point at /m/r3", "/m/r1"] and decision["install"]
    unsourced = role_decisions.sglang_model({**settings, "model": "", "source": {}}, {})
    assert unsourced["changes"] == ["/m/r2", "/m/r1"] and not unsourced["install"], "only the revisions beyond the kept"
    none = role_decisions.sglang_model({"model": "", "source": {}, "on_host": {}, "keep_previous": 1}, {})
    assert none["changes"] == [] and not none["install"]


def test_the_router_decision() -> None:
    router = {"enabled": True, "unit": "sglang-router.service", "url": "http://127.0.0.1:8000", "keys_file": "/s/router.json",
              "workers_file": "/h/router-workers.json", "displaced": [], "by_model": False}  # fmt: skip
    gateway = {"enabled": False, "unit": "sglang-gateway.service", "url": "http://127.0.0.1:9000", "keys_file": "/s/gateway.json",
               "workers_file": "/h/gateway-workers.json", "displaced": [], "by_model": False}  # fmt: skip
    settings: dict[str, Any] = {"processes": [router, gateway], "legacy_files": ["/s/router.env"]}
    settings["unit_dir"] = "/etc/systemd/system"
    answer: dict[str, Any] = {
        "changed_paths": [],
        "read": {
            "found": {
                "/s/gateway.json": [],
                "/h/gateway-workers.json": [],
                "/s/router.env": [],
                "/etc/systemd/system/sglang-router.service": ["/etc/systemd/system/sglang-router.service"],
                "/etc/systemd/system/sglang-gateway.service": [],
            },
            "units": {"sglang-router.service": {"ActiveState": "active", "UnitFileState": "enabled"}},
        },
        "routers": {router["url"]: []},
    }
    assert role_decisions.sglang_router(settings, answer)["changes"] == []
    answer["read"]["found"]["/s/router.env"] = ["/s/router.env"]
    answer["read"]["found"]["/etc/systemd/system/sglang-gateway.service"] = ["/etc/systemd/system/sglang-gateway.service"]
    answer["read"]["units"]["sglang-router.service"]["UnitFileState"] = "disabled"
    answer["routers"] = {router["url"]: ["add http://w"]}
    settings["processes"] = [{**router, "displaced": ["http://w"]}, gateway]
    assert role_decisions.sglang_router(settings, answer)["changes"] == [
        "/s/router.env",
        "sglang-router.service: not running or not enabled",
        "http://127.0.0.1:8000: workers differ from the planned ones",
        "http://127.0.0.1:8000: to register again the workers a new shape stops first",
        "/etc/systemd/system/sglang-gateway.service",
    ]


def test_the_router_decision_creates_its_account_and_folders_apart_from_the_vocabulary() -> None:
    router = {"enabled": True, "unit": "sglang-router.service", "url": "http://127.0.0.1:8000", "keys_file": "/r/router.json",
              "workers_file": "/w/router-workers.json", "displaced": [], "by_model": True}  # fmt: skip
    settings = {"processes": [router], "legacy_files": [], "unit_dir": "/etc/systemd/system", "vocabulary": "/v"}
    units = {"sglang-router.service": {"ActiveState": "active", "UnitFileState": "enabled"}}
    # A host deployed before the router had its own account: neither the account nor its folders exist.
    missing = ["user sglang-router: missing", "/r: missing", "/w: missing"]
    read = {"found": {}, "units": units, "differences": missing, "differing_paths": ["/r", "/w"]}
    decision = role_decisions.sglang_router(settings, {"read": read, "routers": {router["url"]: []}})
    assert decision["account"] == missing and not decision["vocabulary"]
    assert decision["changes"] == missing
    # The vocabulary alone differs: it is sent, the account is left as it is.
    read = {"found": {}, "units": units, "differences": ["/v: missing"], "differing_paths": ["/v"]}
    decision = role_decisions.sglang_router(settings, {"read": read, "routers": {router["url"]: []}})
    assert decision["account"] == [] and decision["vocabulary"] and decision["changes"] == ["/v: missing"]


def test_cuda_and_the_plan() -> None:
    answer = {"changed_paths": ["/etc/apt/preferences.d/nvidia-cuda"], "read": {"differences": ["package cuda is not installed"]}}
    assert role_decisions.cuda({}, answer)["changes"] == ["package cuda is not installed", "/etc/apt/preferences.d/nvidia-cuda"]
    assert role_decisions.plan({"verified_file": "/v.json", "hashed": ["a", "b"]}, {})["changes"] == [
        "/v.json: 2 file(s) verified to record"
    ]
    assert role_decisions.plan({"verified_file": "/v.json", "hashed": []}, {})["changes"] == []
    with pytest.raises(ValueError, match="no decision for a request named 'other'"):
        role_decisions.decide("other", {}, {})


def test_the_probe_returns_every_role_s_decision_and_their_changes_in_the_requests_order() -> None:
    result: dict[str, Any] = {"answers": {"cuda": {"changed_paths": ["/c"], "read": {"differences": []}}}}
    requests = {
        "sglang_plan": {"name": "sglang_plan", "decide": {"verified_file": "/v.json", "hashed": ["a"]}},
        "cuda": {"name": "cuda", "decide": {}},
        "other": {"name": "other"},  # no decision asked
    }
    sglang_instance_files.decide(result, requests)
    assert result["changes"] == ["/v.json: 1 file(s) verified to record", "/c"]
    assert result["answers"]["cuda"]["decision"] == {"changes": ["/c"]} and "other" not in result["answers"]


def test_the_router_request_is_built_from_the_processes_once() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_request

    router = {"kind": "router", "enabled": True, "unit": "sglang-router.service", "url": "http://127.0.0.1:8000",
              "keys_file": "/s/router.json", "workers_file": "/h/router-workers.json", "displaced": [], "by_model": True,
              "workers": ["http://w"], "keep": [], "models": {"http://w": "m"}}  # fmt: skip
    gateway = {**router, "kind": "gateway", "enabled": False, "unit": "sglang-gateway.service", "keys_file": "/s/gateway.json",
               "workers_file": "/h/gateway-workers.json", "by_model": False}  # fmt: skip
    settings = {
        "role_path": "/roles/sglang_router", "api_key": "sk-client", "admin_keys": {"router": "sk-admin"},
        "account": {"user": "sglang-router", "group": "sglang-router", "config_dir": "/r", "state_dir": "/w"},
        "launcher_files": [{"src": "sglang_router_launcher.py", "dest": "/l"}],
        "vocabulary": {"dest": "/v", "sha256": "abc"}, "legacy_files": ["/s/router.env"], "write": True, "ask": True,
    }  # fmt: skip
    request = sglang_router_request([router, gateway], settings)
    assert [file["dest"] for file in request["files"]] == ["/l", "/etc/systemd/system/sglang-router.service", "/s/router.json"]
    units = ["/etc/systemd/system/sglang-router.service", "/etc/systemd/system/sglang-gateway.service"]
    assert request["read"]["globs"] == ["/s/gateway.json", "/h/gateway-workers.json", "/s/router.env", *units]
    assert request["read"]["units"] == ["sglang-router.service", "sglang-gateway.service"]
    assert [path["path"] for path in request["read"]["paths"]] == ["/r", "/w", "/v"], "a router in front of several models"
    # The router's own account and its folders, root's: the account reads its files and can replace none of them.
    assert request["read"]["accounts"] == [
        {"name": "sglang-router", "group": "sglang-router", "home": "/w", "shell": "/usr/sbin/nologin"}
    ]
    folders = request["read"]["paths"][:2]
    assert {(path["owner"], path["group"], path["mode"]) for path in folders} == {("root", "sglang-router", "0750")}
    [keys] = [file for file in request["files"] if file["dest"] == "/s/router.json"]
    assert (keys["owner"], keys["group"], keys["mode"], keys["private"]) == ("root", "sglang-router", "0640", True)
    assert request["decide"]["vocabulary"] == "/v"
    assert [(r["url"], r["api_key"]) for r in request["routers"]] == [("http://127.0.0.1:8000", "sk-admin")]
    assert request["decide"]["legacy_files"] == ["/s/router.env"] and len(request["decide"]["processes"]) == 2
    quiet = sglang_router_request([router, gateway], {**settings, "write": False, "ask": False})
    assert quiet["files"] == [] and quiet["routers"] == [], "a host with a problem: nothing rendered, no router asked"
    none = sglang_router_request([{**router, "enabled": False}, gateway], settings)
    assert none["read"]["accounts"] == [] and none["read"]["paths"] == [], "no router: no account made for it"


def test_a_router_that_gains_the_instances_ca_restarts_before_they_roll() -> None:
    """The routers that must know the instances' CA before the instances roll to https: a running one whose unit this
    run writes with --ca-cert-paths (TLS turns on), or whose CA file the server role writes anew (a new CA); not one
    without a CA (its unit changes for another reason: it restarts after the rollout, its keys with the instances'),
    nor one that is not running (it starts after the instances, as on a first deploy)."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes
    from ansible_collections.sglang.fleet.plugins.filter.sglang_run_state import sglang_router_bounced

    def spec(kind: str, port: int) -> dict[str, Any]:
        return {"enabled": True, "unit": f"sglang-{kind}.service", "url": f"http://127.0.0.1:{port}", "host": "127.0.0.1",
                "port": port, "prometheus_host": "127.0.0.1", "prometheus_port": port + 1, "keys_file": f"/etc/r/{kind}.json",
                "workers_file": f"/var/lib/r/{kind}-workers.json"}  # fmt: skip

    ca = "/usr/local/lib/sglang-fleet/sglang-ca.pem"
    instances = [{"unit": "sglang-30000.service", "url": "https://127.0.0.1:30000", "served_model_name": "q"}]
    settings = {"router": spec("router", 30080), "gateway": spec("gateway", 30090), "gateway_members": {}, "gateway_models": []}
    processes = sglang_router_processes(instances, {**settings, "worker_ca": ca})
    units = ["/etc/systemd/system/sglang-router.service", "/etc/systemd/system/sglang-gateway.service"]
    router: dict[str, Any] = {"files_to_write": [*units, "/etc/r/router.json"], "stopped_units": []}
    server: dict[str, Any] = {"files_to_write": [ca, "/etc/systemd/system/sglang-30000.service"]}

    def first(router: dict[str, Any], server: dict[str, Any], processes: list[dict[str, Any]] = processes) -> list[str]:
        chosen = role_decisions.routers_first(processes, router, server, "/etc/systemd/system")
        return [process["unit_path"] for process in chosen]

    assert first(router, server) == units, "TLS turns on: the router and the gateway gain --ca-cert-paths"
    [moved, _gateway] = role_decisions.routers_first(processes, router, server, "/etc/systemd/system")
    assert moved["serving_workers"] == ["https://127.0.0.1:30000", "http://127.0.0.1:30000"], "as they serve before and after"
    assert moved["serving_models"] == {"https://127.0.0.1:30000": "q", "http://127.0.0.1:30000": "q"}
    assert first({**router, "files_to_write": []}, server) == units, "a new CA: read again"
    assert first({**router, "stopped_units": ["sglang-gateway.service"]}, {"files_to_write": []}) == units[:1]
    assert first({**router, "files_to_write": ["/etc/r/router.json"]}, {"files_to_write": []}) == [], "a new key: after"
    plain = sglang_router_processes(instances, settings)
    assert first(router, server, plain) == [], "no CA: every router restarts after the rollout"
    # The restart before the rollout bounced them too: the router role reconciles them after it.
    loop = {"results": [{"changed": True, "item": {"unit": "sglang-router.service"}}]}
    assert sglang_router_bounced({}, {}, loop) == ["sglang-router.service"]
    assert sglang_router_bounced(loop, {}, loop) == ["sglang-router.service"]
