"""The sandbox beyond loopback: deployed once with an API key from ansible-vault and listening on every address
(inventory/sandbox-on-network.yml's addresses), where the key protects every server and is never shown, and a real
Prometheus on the sandbox's own Docker network (playbooks/sandbox-prometheus.yml) scrapes every instance and router
and fires an alert for real. Deployed back as it was afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import (
    GATEWAY,
    GATEWAY_KEYS,
    ROOT,
    SANDBOX_CA,
    SERVER_CA,
    Run,
    chat_requests,
    http_status,
    load_through_router,
    on_host,
    on_host_with_router_client,
    overlay_inventory,
    registered_workers,
    run_playbook,
    sandbox_test_ca,
    wait_until,
)

VAULT_PASSWORD = "sandbox-vault-password"
API_KEY = "sk-sandbox-0123456789"
PROMETHEUS = "http://127.0.0.1:19090"
# Scraped and evaluated every second, "down" after 3 s (the playbook's defaults: 15 s and 2 m).
FAST_ALERTS = {"sglang_prometheus_scrape_interval": "1s", "sglang_alert_down_for": "3s"}
STOPPED = ("b200", "sglang-30002")
# The fleet gateway of inventory/sandbox-on-network.yml is ct129's (fleet.GATEWAY: https, as ct129 reaches it).
ROUTER = "http://127.0.0.1:30100"
ROUTER_KEYS = "/etc/sglang-router/router.json"
# b200 in two instance groups: five workers of the fleet's (mirror's) model, two of the Qwen3.6-27B stand-in.
MIRROR_MODEL, OTHER_MODEL = "tiny-qwen3.5", "qwen3.6-27b"
B200_GROUPS = [
    {"name": "tiny", "instance_count": 5},
    {"name": "qwen27b", "model_path": "/srv/models/Qwen3.6-27B", "served_model_name": OTHER_MODEL},
]
# Every instance serves https with the sandbox's test certificate (inventory/sandbox-on-network.yml's
# sglang_server_tls_*): ct129's gateway reaches its own on loopback, b200's across the network, each verified.
FLEET_WORKERS = {"https://127.0.0.1:30000": MIRROR_MODEL} | {
    f"https://b200:{30000 + index}": MIRROR_MODEL if index < 5 else OTHER_MODEL for index in range(7)
}


@dataclass
class Keyed:
    """The keyed deploy on the network: its run, inventory, the vault option every later run needs, and when it began
    on b200 (the journal since then)."""

    deployed: Run
    inventory: Path
    vault: str
    since: str


@pytest.fixture(scope="module")
def keyed(sandbox: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    directory = tmp_path_factory.mktemp("keyed")
    password = directory / "vault-password"
    password.write_text(VAULT_PASSWORD)
    encrypted = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-vault"),
            "encrypt_string",
            "--vault-password-file",
            str(password),
            API_KEY,
            "--name",
            "sglang_api_key",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The addresses of `make sandbox-prometheus` (and its test CA); the key from vault instead of that file's test key.
    sandbox_test_ca()
    addresses = yaml.safe_load((ROOT / "inventory/sandbox-on-network.yml").read_text())
    del addresses["sglang_api_key"]
    inventory = overlay_inventory(directory, host_vars={"b200": {"sglang_instance_groups": B200_GROUPS}}, group_vars=addresses)
    (inventory / "group_vars" / "all.yml").write_text((inventory / "group_vars" / "all.yml").read_text() + "\n" + encrypted)
    vault = f"--vault-password-file {password}"
    # The journal since now: the sandbox hosts keep theirs across test sessions.
    since = on_host("b200", "date", "+%Y-%m-%d %H:%M:%S").strip()
    try:
        yield Keyed(run_playbook("deploy.yml", inventory=inventory, cmdline=f"{vault} --diff"), inventory, vault, since)
    finally:
        subprocess.run(["docker", "rm", "--force", "sglang-fleet-prometheus"], capture_output=True, check=False)
        restored = run_playbook("deploy.yml")
    assert restored.rc == 0, restored.failure_messages()
    assert http_status("b200", "http://127.0.0.1:30003/v1/models") == 200
    assert on_host(STOPPED[0], "systemctl", "is-active", f"{STOPPED[1]}.service").strip() == "active"
    assert on_host("b200", "ls", "/etc/sglang-router") == "router.json\n", "only the router's admin key is left"
    assert on_host("b200", "ls", "-A", "/etc/sglang-fleet/secrets") == "", "no router or TLS file left there"
    assert "server-ca.pem" not in on_host("b200", "ls", "/usr/local/lib/sglang-fleet"), "the instances' CA removed too"
    # ct129's gateway is gone with its files: no unit, keys or workers file.
    assert "sglang-gateway" not in on_host("ct129", "ls", "/etc/systemd/system")
    left = "find /etc/sglang-router /etc/sglang-fleet/secrets /var/lib/sglang-router -mindepth 1 2>/dev/null || true"
    assert on_host("ct129", "sh", "-c", left).strip() == ""
    assert "gateway-workers.json" not in on_host("ct129", "ls", "-A", "/var/lib/sglang")
    assert json.loads(on_host("b200", "cat", "/etc/sglang-router/router.json"))["api_key"] == ""


def router_status(host: str, path: str, key: str) -> int:
    """HTTP status of a GET of b200's router with a Bearer key, made inside the host."""
    script = (
        "import sys, urllib.request, urllib.error\n"
        "request = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
        "try:\n    print(urllib.request.urlopen(request, timeout=30).status)\n"
        "except urllib.error.HTTPError as error:\n    print(error.code)\n"
    )
    return int(on_host(host, "python3", "-c", script, f"http://127.0.0.1:30100{path}", key).strip())


def test_api_key_from_vault_protects_the_servers_and_is_never_shown(keyed: Keyed, tmp_path: Path) -> None:
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    assert all(API_KEY not in json.dumps(event) for event in keyed.deployed.events), "the key appears in the deploy's output"
    listing = on_host(
        "b200",
        "stat",
        "--format=%n %a %U",
        "/etc/sglang-fleet/secrets/sglang-30003.yaml",
        "/etc/sglang-router/router.json",
    )
    assert listing.split("\n")[:2] == [
        "/etc/sglang-fleet/secrets/sglang-30003.yaml 640 root",
        "/etc/sglang-router/router.json 640 root",
    ]
    assert API_KEY not in on_host("b200", "systemctl", "cat", "sglang-30003.service")
    # The router's keys reach it through its launcher: not in its command line, nor in its environment.
    admin_key = json.loads(on_host("b200", "cat", "/etc/sglang-router/router.json"))["admin_key"]
    assert len(admin_key) == 40 and admin_key != API_KEY
    assert all(admin_key not in json.dumps(event) for event in keyed.deployed.events), "the admin key appears in the output"
    router_pid = on_host("b200", "systemctl", "show", "--property=MainPID", "--value", "sglang-router.service").strip()
    assert router_pid not in ("", "0")
    for name in ("cmdline", "environ"):
        shown = on_host("b200", "cat", f"/proc/{router_pid}/{name}")
        assert API_KEY not in shown and admin_key not in shown, f"a key is in the router's /proc/<pid>/{name}"
    assert API_KEY not in on_host("b200", "systemctl", "cat", "sglang-router.service")
    # The client key serves requests, the admin key (only) manages the router's workers.
    assert router_status("b200", "/workers", API_KEY) == 401
    assert router_status("b200", "/workers", admin_key) == 200
    assert router_status("b200", "/workers", "") == 401
    # SGLang (here the simulator) logs its settings with the key at every start; the launcher redacts it,
    # also where systemd is too old for the unit's LogFilterPatterns= (Debian 12's 252).
    journal = on_host("b200", "journalctl", "--no-pager", "-o", "cat", f"--since={keyed.since}", "-u", "sglang-30003.service")
    assert API_KEY not in journal, "the key reached the journal"
    unit = on_host("b200", "systemctl", "cat", "sglang-30003.service")
    assert "'api_key': '<redacted>'" in journal or "LogFilterPatterns=~api_key" in unit
    assert http_status("b200", "https://127.0.0.1:30003/v1/models") == 401
    assert http_status("b200", "https://127.0.0.1:30003/health_generate") == 200
    status = run_playbook("playbooks/status.yml", inventory=keyed.inventory, cmdline=keyed.vault)
    assert status.rc == 0 and all(API_KEY not in json.dumps(event) for event in status.events)
    bench = run_playbook(
        "playbooks/bench.yml",
        inventory=keyed.inventory,
        cmdline=f"{keyed.vault} -vvv",
        extravars={"sglang_bench_dir": str(tmp_path / "bench"), "sglang_bench_requests": 2, "sglang_bench_concurrency": [1]},
    )
    assert bench.rc == 0, bench.failure_messages()
    assert all(API_KEY not in json.dumps(event) for event in bench.events), "the key shows in the bench's -vvv output"
    measured = json.loads((tmp_path / "bench" / "bench.json").read_text())["endpoints"]
    assert all(r["failed"] == 0 for endpoint in measured for r in endpoint["results"]), "the key reached the servers"


def test_the_gateway_routes_each_request_to_the_workers_of_the_model_it_names(keyed: Keyed) -> None:
    """b200 serves two models (instance groups); through ct129's gateway a client picks one by name and only its
    workers answer; a model nobody serves is refused (404, smg's answer)."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    assert registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}
    other = [("b200", 30005), ("b200", 30006)]
    mirror = [("ct129", 30000)] + [("b200", 30000 + index) for index in range(5)]
    before = {worker: chat_requests(*worker) for worker in other + mirror}
    script = (
        "import json, ssl, sys, urllib.request, urllib.error\n"
        "key = json.load(open(sys.argv[2]))['api_key']\n"
        "body = json.dumps({'model': sys.argv[3], 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4})\n"
        "request = urllib.request.Request(sys.argv[1] + '/v1/chat/completions', data=body.encode(),\n"
        "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
        f"tls = ssl.create_default_context(cafile={SANDBOX_CA!r})\n"
        "try:\n    print(urllib.request.urlopen(request, timeout=30, context=tls).status)\n"
        "except urllib.error.HTTPError as error:\n    print(error.code)\n"
    )
    answers = [on_host("ct129", "python3", "-c", script, GATEWAY, GATEWAY_KEYS, OTHER_MODEL).strip() for _ in range(6)]
    assert answers == ["200"] * 6
    assert sum(chat_requests(*worker) - before[worker] for worker in other) == 6
    assert all(chat_requests(*worker) == before[worker] for worker in mirror), "a request reached another model's worker"
    # The real smg 1.13.0 (the gateway these hosts run) answers a model nobody serves 404 (model_not_found), where
    # sglang-router 0.3.2 answered 503.
    assert on_host("ct129", "python3", "-c", script, GATEWAY, GATEWAY_KEYS, "no-such-model").strip() == "404"


def test_the_gateway_serves_tls_that_only_a_client_with_the_fleets_ca_trusts(keyed: Keyed) -> None:
    """Issue 38, finding 8: beyond loopback ct129's gateway serves https with the sandbox's test CA; a client with that
    CA is served, one without it (the system's CAs) is refused before it sends anything, and plain http gets no HTTP
    answer on the gateway's port. Its key is root:<servers' group> 0640 (its account reads it, cannot replace it);
    its metrics stay plain http on their own address (Prometheus scrapes them: the test below)."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    script = (
        "import ssl, sys, urllib.request\n"
        "tls = ssl.create_default_context(cafile=sys.argv[2] or None)\n"
        "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=30, context=tls).status)\n"
        "except Exception as error:\n    print(type(error).__name__, error)\n"
    )
    for host, url in (("ct129", f"{GATEWAY}/liveness"), ("b200", "https://ct129:30200/liveness")):
        assert on_host(host, "python3", "-c", script, url, SANDBOX_CA).strip() == "200"
        refused = on_host(host, "python3", "-c", script, url, "").strip()
        assert refused.startswith("URLError") and "CERTIFICATE_VERIFY_FAILED" in refused, refused
    plain = on_host("b200", "python3", "-c", script, "http://ct129:30200/liveness", "").strip()
    assert not plain.startswith("200"), plain
    listing = on_host(
        "ct129",
        "stat",
        "--format=%n %a %U %G",
        "/etc/sglang-router/gateway-tls.key",
        "/etc/sglang-router/gateway-tls.pem",
        SANDBOX_CA,
    )
    assert listing.split("\n")[:3] == [
        "/etc/sglang-router/gateway-tls.key 640 root sglang-router",
        "/etc/sglang-router/gateway-tls.pem 640 root sglang-router",
        f"{SANDBOX_CA} 644 root root",
    ]
    assert "PRIVATE KEY" not in json.dumps(keyed.deployed.events), "the gateway's key shows in the deploy's output"
    unit = on_host("ct129", "systemctl", "cat", "sglang-gateway.service")
    assert "--tls-cert-path" in unit and "--tls-key-path" in unit
    # The gateway's unit stays as confined as every other (issue 38: systemd-analyze security <= 3.0).
    exposure = on_host("ct129", "systemd-analyze", "security", "--no-pager", "sglang-gateway.service").strip().splitlines()[-1]
    print(exposure)
    assert float(exposure.split(": ")[1].split()[0]) <= 3.0, exposure


def test_remote_workers_serve_tls_the_gateway_verifies_and_a_client_without_the_ca_is_refused(keyed: Keyed) -> None:
    """Issue 38, finding 8: b200's instances, which ct129's keyed gateway reaches across the network, serve only https
    (SGLang's --ssl-certfile/--ssl-keyfile, the sandbox's test certificate installed root:sglang 0640); the gateway
    registers them by https URL and verifies them with the instances' CA (smg's --ca-cert-paths), so requests through
    it reach them; a client on another host with that CA is served, one without it is refused before it sends
    anything, and plain http gets no HTTP answer."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    workers = registered_workers()
    assert {url for url in workers if "b200" in url} == {f"https://b200:{30000 + index}" for index in range(7)}
    assert all(healthy for _model, healthy in workers.values()), workers
    gateway_unit = on_host("ct129", "systemctl", "cat", "sglang-gateway.service")
    assert f"--ca-cert-paths {SERVER_CA}" in gateway_unit
    instance_unit = on_host("b200", "systemctl", "cat", "sglang-30005.service")
    assert "--ssl-certfile /etc/sglang-fleet/secrets/server-tls.pem" in instance_unit
    assert "--ssl-keyfile /etc/sglang-fleet/secrets/server-tls.key" in instance_unit
    listing = on_host("b200", "stat", "--format=%n %a %U %G", "/etc/sglang-fleet/secrets/server-tls.key", SERVER_CA)
    assert listing.split("\n")[:2] == ["/etc/sglang-fleet/secrets/server-tls.key 640 root sglang", f"{SERVER_CA} 644 root root"]
    # Through the gateway: the other model's workers are b200's only, so each answer crossed the network over https.
    other = [("b200", 30005), ("b200", 30006)]
    before = sum(chat_requests(*worker) for worker in other)
    script = (
        "import json, ssl, sys, urllib.request\n"
        "key = json.load(open(sys.argv[2]))['api_key']\n"
        "body = json.dumps({'model': sys.argv[3], 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4})\n"
        "request = urllib.request.Request(sys.argv[1] + '/v1/chat/completions', data=body.encode(),\n"
        "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
        f"print(urllib.request.urlopen(request, timeout=30, context=ssl.create_default_context(cafile={SANDBOX_CA!r})).status)\n"
    )
    answers = [on_host("ct129", "python3", "-c", script, GATEWAY, GATEWAY_KEYS, OTHER_MODEL).strip() for _ in range(3)]
    assert answers == ["200"] * 3
    assert sum(chat_requests(*worker) for worker in other) - before == 3
    # A client on ct129 of b200's worker itself: with the instances' CA, without it, and over plain http.
    probe = (
        "import ssl, sys, urllib.request\n"
        "tls = ssl.create_default_context(cafile=sys.argv[2] or None) if sys.argv[1].startswith('https:') else None\n"
        "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=30, context=tls).status)\n"
        "except Exception as error:\n    print(type(error).__name__, error)\n"
    )
    assert on_host("ct129", "python3", "-c", probe, "https://b200:30005/health", SERVER_CA).strip() == "200"
    refused = on_host("ct129", "python3", "-c", probe, "https://b200:30005/health", "").strip()
    assert refused.startswith("URLError") and "CERTIFICATE_VERIFY_FAILED" in refused, refused
    plain = on_host("ct129", "python3", "-c", probe, "http://b200:30005/health", "").strip()
    assert not plain.startswith("200"), plain
    assert "PRIVATE KEY" not in json.dumps(keyed.deployed.events), "the instances' key shows in the deploy's output"


def changes_said(run: Run) -> dict[str, str]:
    """What a deploy said it changes on each host (by host)."""
    said = [data for data in run.results() if data["task"] == "Say what this deploy changes on each host"]
    return {data["host"]: data["res"]["msg"] for data in said}


def test_a_worker_missing_from_the_gateway_comes_back_while_its_converged_host_ends_early(keyed: Keyed) -> None:
    """The next deploy finds the whole fleet as planned ("Nothing to change" on both hosts); with one of b200's workers
    taken out of ct129's gateway by hand, b200 still has nothing to change and ends early, and ct129's gateway
    registers that worker again: b200's workers are the gateway's for the whole run, not only while b200 runs."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()

    def deploy_says() -> dict[str, str]:
        again = run_playbook("deploy.yml", inventory=keyed.inventory, cmdline=keyed.vault)
        assert again.rc == 0, again.failure_messages()
        return changes_said(again)

    assert wait_until(lambda: registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}, 60)
    assert deploy_says() == {
        "ct129": "ct129: 1 instance(s) planned, no problems. Nothing to change",
        "b200": "b200: 7 instance(s) planned, no problems. Nothing to change",
    }
    removal = (
        f"\nimport json\nkey = json.load(open({GATEWAY_KEYS!r}))['admin_key']"
        f"\nprint(remove_worker({GATEWAY!r}, 'https://b200:30004', api_key=key, ca_file={SANDBOX_CA!r}))\n"
    )
    assert on_host_with_router_client("ct129", removal).strip() == "True"
    said = deploy_says()
    assert said["b200"] == "b200: 7 instance(s) planned, no problems. Nothing to change"
    planned = "ct129: 1 instance(s) planned, no problems"
    assert said["ct129"].startswith(f"{planned}. To change: {GATEWAY}: workers differ"), said
    assert registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}


def test_a_gateway_host_with_nothing_else_to_change_stays_for_the_workers_another_host_reshapes(
    keyed: Keyed, tmp_path: Path
) -> None:
    """b200 swaps GPUs 0 and 1 between two instances (the same URLs): their rollout stops them drained from ct129's
    gateway too, so `--check` says ct129 has to register them again there (it does not end early) and b200's router
    likewise."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    inventory = tmp_path / "inventory"
    shutil.copytree(keyed.inventory, inventory)
    b200 = inventory / "host_vars" / "b200.yml"
    b200.write_text(b200.read_text() + "\nsglang_gpu_ids: [1, 0, 2, 3, 4, 5, 6]\n")
    checked = run_playbook("deploy.yml", inventory=inventory, cmdline=f"{keyed.vault} --check")
    assert checked.rc == 0, checked.failure_messages()
    said = changes_said(checked)
    again = "to register again the workers a new shape stops first"
    assert said["ct129"] == f"ct129: 1 instance(s) planned, no problems. To change: {GATEWAY}: {again}", said
    assert f"http://127.0.0.1:30100: {again}" in said["b200"], said


def test_one_gateway_routes_to_both_hosts_and_a_rolling_restart_of_all_eight_fails_no_request(keyed: Keyed) -> None:
    """ct129's gateway routes to its own instance and to b200's seven over the sandbox network; a deploy that restarts
    every instance (ct129's only one included; slower tokens, so requests are in flight) takes each out of the gateway
    and out of b200's router first, so the load through either never fails and at most one worker is out of rotation
    at a time."""
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    keys = json.loads(on_host("ct129", "cat", GATEWAY_KEYS))
    assert keys["api_key"] == API_KEY and len(keys["admin_key"]) == 40
    assert all(keys["admin_key"] not in json.dumps(event) for event in keyed.deployed.events)
    assert registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}
    with (
        load_through_router(GATEWAY, host="ct129", keys_file=GATEWAY_KEYS, model=MIRROR_MODEL) as report,
        load_through_router(ROUTER, host="b200", model=MIRROR_MODEL) as router_report,
    ):
        rolled = run_playbook(
            "deploy.yml",
            inventory=keyed.inventory,
            cmdline=keyed.vault,
            extravars={"sglang_environment": {"SGLANG_SIM_TOKEN_SECONDS": "0.002"}},
        )
    assert rolled.rc == 0, rolled.failure_messages()
    restarted = {
        event["event_data"]["host"]: sorted(event["event_data"]["res"].get("restarted", {}))
        for event in rolled.events
        if event.get("event") == "runner_on_ok"
        and event["event_data"].get("task", "").startswith("Roll the ")
        and event["event_data"]["res"].get("restarted")
    }
    assert restarted == {"ct129": ["sglang-30000"], "b200": [f"sglang-{30000 + index}" for index in range(7)]}
    assert report["requests"] > 0 and report["failed"] == 0, report
    assert report["fewest_in_rotation"] == 7 and report["most_in_rotation"] == 8, report
    assert router_report["requests"] > 50 and router_report["failed"] == 0, router_report
    assert router_report["fewest_in_rotation"] == 6 and router_report["most_in_rotation"] == 7, router_report
    assert registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}
    # A gateway or router that restarts (a crash, a reboot) registers again, each with its model, the workers its last
    # deploy registered (sglang-router's multi-model mode ignores --worker-urls).
    on_host("ct129", "systemctl", "restart", "sglang-gateway.service")
    on_host("b200", "systemctl", "restart", "sglang-router.service")
    assert wait_until(lambda: registered_workers() == {url: (model, True) for url, model in FLEET_WORKERS.items()}, 60)
    router_workers = {url.replace("b200", "127.0.0.1"): (model, True) for url, model in FLEET_WORKERS.items() if "b200" in url}
    assert wait_until(lambda: registered_workers("b200", ROUTER, ROUTER_KEYS) == router_workers, 60)


def prometheus(path: str) -> Any:
    """The data of an answer of the sandbox's Prometheus API, asked on the control node's loopback."""
    with urllib.request.urlopen(f"{PROMETHEUS}{path}", timeout=10) as answer:
        return json.load(answer)["data"]


def targets() -> dict[str, str]:
    """scrape URL -> health ("up", "down", "unknown") of every active target."""
    return {target["scrapeUrl"]: target["health"] for target in prometheus("/api/v1/targets")["activeTargets"]}


def alerts() -> list[tuple[str, str, str]]:
    """(alertname, host, instance) of every firing alert."""
    return [
        (alert["labels"]["alertname"], alert["labels"].get("fleet_host", ""), alert["labels"].get("sglang_instance", ""))
        for alert in prometheus("/api/v1/alerts")["alerts"]
        if alert["state"] == "firing"
    ]


def test_prometheus_on_the_sandbox_network_scrapes_every_target_and_fires_when_an_instance_stops(
    keyed: Keyed, tmp_path: Path
) -> None:
    assert keyed.deployed.rc == 0, keyed.deployed.failure_messages()
    started = run_playbook(
        "playbooks/sandbox-prometheus.yml",
        inventory=keyed.inventory,
        cmdline=keyed.vault,
        extravars={"sglang_prometheus_dir": str(tmp_path), **FAST_ALERTS},
    )
    assert started.rc == 0, started.failure_messages()
    # Every target the written files list, by host name on the sandbox's network: 8 instances (over https, verified
    # with the instances' CA the playbook copies beside its configuration), b200's router and ct129's fleet gateway
    # (their exporters plain http on their own addresses). No credentials: /metrics needs no API key.
    listed = {
        f"{group['labels'].get('__scheme__', 'http')}://{address}/metrics"
        for path in sorted(tmp_path.glob("sglang-targets-*.json"))
        for group in json.loads(path.read_text())
        for address in group["targets"]
    }
    assert listed == {"https://ct129:30000/metrics", "http://ct129:29200/metrics", "http://b200:29000/metrics"} | {
        f"https://b200:{30000 + index}/metrics" for index in range(7)
    }
    assert wait_until(lambda: targets() == dict.fromkeys(listed, "up"), 30), targets()
    assert alerts() == []
    on_host(STOPPED[0], "systemctl", "stop", f"{STOPPED[1]}.service")
    assert wait_until(lambda: ("SGLangInstanceDown", *STOPPED) in alerts(), 30), alerts()
    assert targets()[f"https://{STOPPED[0]}:30002/metrics"] == "down"
    assert [alert for alert in alerts() if alert[0] == "SGLangInstanceDown"] == [("SGLangInstanceDown", *STOPPED)]
