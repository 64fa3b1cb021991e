"""b200 behind its router: its workers listed to its admin key only, and a host that becomes unreachable mid-rollout
does not stop the others. (A rolling restart under load through the router and the fleet gateway:
test_on_network.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from fleet import (
    Run,
    http_status,
    on_host,
    on_host_with_router_client,
    overlay_inventory,
    router_key,
    router_worker_urls,
    run_playbook,
    unit_starts,
)

ROUTER = "http://127.0.0.1:30100"


LIST_WORKERS = """
import json, sys, urllib.error, urllib.request
key = json.load(open("/etc/sglang-router/router.json"))["admin_key"] if sys.argv[2] == "admin" else ""
request = urllib.request.Request(sys.argv[1] + "/workers", headers={"Authorization": "Bearer " + key} if key else {})
try:
    print(urllib.request.urlopen(request, timeout=30).read().decode())
except urllib.error.HTTPError as error:
    print(json.dumps({"status": error.code}))
"""


def test_router_serves_and_lists_every_worker_to_its_admin_key_only(sandbox: Run) -> None:
    assert http_status("b200", f"{ROUTER}/readiness") == 200
    workers = json.loads(on_host("b200", "python3", "-c", LIST_WORKERS, ROUTER, "admin"))
    assert sorted(worker["url"] for worker in workers["workers"]) == [f"http://127.0.0.1:{30000 + i}" for i in range(7)]
    # Without a key (any local account, by default) the worker registry is closed.
    assert json.loads(on_host("b200", "python3", "-c", LIST_WORKERS, ROUTER, "none")) == {"status": 401}
    # Root's, read by the router's own account only: the servers' account (a worker taken over) cannot read it.
    keys = on_host("b200", "stat", "--format=%a %U %G", "/etc/sglang-router/router.json").strip()
    assert keys == "640 root sglang-router"
    unit = on_host("b200", "systemctl", "show", "--property=User,Group", "sglang-router.service").split()
    assert sorted(unit) == ["Group=sglang-router", "User=sglang-router"]
    as_servers = "cat /etc/sglang-router/router.json >/dev/null 2>&1 && echo read || echo refused"
    refused = on_host("b200", "runuser", "-u", "sglang", "--", "sh", "-c", as_servers).strip()
    assert refused == "refused"
    # Its folders are root's, and a host an earlier release deployed (the router as the servers' account, its files
    # in their secrets folder and home) keeps none of those files.
    folders = on_host("b200", "stat", "--format=%n %a %U %G", "/etc/sglang-router", "/var/lib/sglang-router").splitlines()
    assert folders == ["/etc/sglang-router 750 root sglang-router", "/var/lib/sglang-router 750 root sglang-router"]
    assert "router-workers.json" in on_host("b200", "ls", "-A", "/var/lib/sglang-router")
    assert "router.json" not in on_host("b200", "ls", "-A", "/etc/sglang-fleet/secrets")
    assert "router-workers.json" not in on_host("b200", "ls", "-A", "/var/lib/sglang")


def test_an_unreachable_host_mid_rollout_leaves_the_others_to_finish(sandbox: Run, tmp_path: Path) -> None:
    inventory = overlay_inventory(
        tmp_path,
        host_vars={
            "ct129": {"sglang_instance_overrides": {0: {"server_args": {"max-running-requests": 32}}}},
            "b200": {"sglang_instance_overrides": {0: {"server_args": {"max-running-requests": 256}}}},
        },
    )
    killed: list[str] = []

    def kill_ct129_when_a_rollout_starts(event: dict[str, Any]) -> None:
        data = event.get("event_data", {})
        if not killed and event.get("event") == "runner_on_start" and data.get("task", "").startswith("Roll the changed running"):
            subprocess.run(["docker", "kill", "ct129"], check=True, capture_output=True)
            killed.append(data.get("host", ""))

    before = unit_starts("b200")
    try:
        interrupted = run_playbook("deploy.yml", inventory=inventory, on_event=kill_ct129_when_a_rollout_starts)
    finally:
        subprocess.run(["docker", "start", "ct129"], check=True, capture_output=True)
    assert killed, "the rollout started"
    assert interrupted.rc != 0
    unreachable = {
        e["event_data"]["host"] for e in interrupted.events if e.get("event") in ("runner_on_unreachable", "runner_on_failed")
    }
    assert unreachable == {"ct129"}
    assert unit_starts("b200")["sglang-30000.service"] != before["sglang-30000.service"], "b200 finished its rollout"
    converged = run_playbook("deploy.yml", inventory=inventory)
    assert converged.rc == 0, converged.failure_messages()
    assert run_playbook("deploy.yml", inventory=inventory).changed() == []
    restored = run_playbook("deploy.yml")
    assert restored.rc == 0, restored.failure_messages()


def test_router_preflight_refuses_a_port_of_an_instance(sandbox: Run, tmp_path: Path) -> None:
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_router_port": 30003}})
    since = on_host("b200", "date", "+%Y-%m-%d %H:%M:%S").strip()
    refused = run_playbook("deploy.yml", inventory=inventory, tags="preflight")
    assert refused.rc != 0
    assert "b200 router: sglang_router_port=30003: port 30003 is sglang-30003" in "\n".join(refused.failure_messages())
    # Preflight's probe asks a router for its workers (with its admin key) only at a port nothing else holds.
    journal = on_host("b200", "journalctl", "--unit=sglang-30003.service", f"--since={since}", "--no-pager")
    assert "/workers" not in journal, journal


def test_a_worker_left_out_of_the_router_is_put_back_by_the_next_run(sandbox: Run) -> None:
    """As if a run died between taking sglang-30003 out of the router and adding it back: the next run adds it."""
    removal = f"\nprint(remove_worker({ROUTER!r}, 'http://127.0.0.1:30003', api_key={router_key()!r}))\n"
    assert on_host_with_router_client("b200", removal).strip() == "True"
    assert "http://127.0.0.1:30003" not in router_worker_urls()
    starts = unit_starts("b200")
    converged = run_playbook("deploy.yml", limit="b200")
    assert converged.rc == 0, converged.failure_messages()
    reconciled = [change for change in converged.changed() if change[1].startswith("Reconcile the routers' workers")]
    assert reconciled == [("b200", "Reconcile the routers' workers with the planned instances", "sglang-router.service")], (
        converged.changed()
    )
    assert router_worker_urls(healthy=True) == [f"http://127.0.0.1:{30000 + i}" for i in range(7)]
    assert unit_starts("b200") == starts, "no worker was restarted for it"
    assert run_playbook("deploy.yml", limit="b200").changed() == [], "the next run finds nothing to reconcile"


CHAT = """
import json, sys, urllib.request
model = json.load(urllib.request.urlopen(sys.argv[1] + "/v1/models", timeout=30))["data"][0]["id"]
body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
for _ in range(int(sys.argv[2])):
    request = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    print(urllib.request.urlopen(request, timeout=60).status)
"""


def test_power_of_two_routes_over_the_workers_with_sglang_0_5_23(sandbox: Run) -> None:
    """sglang_router_policy power_of_two with the simulator in 0.5.23's mode: the router starts, answers every
    request and spreads them over several workers. sglang-router 0.3.2 refused to start with it (and so does smg in
    its single-pool mode: "Power-of-two policy requires at least 2 workers", the fleet registering its workers after
    the start), and 0.3.2 polled /get_load, which 0.5.23 removed."""
    try:
        deployed = run_playbook("deploy.yml", limit="b200", extravars={"sglang_router_policy": "power_of_two"})
        assert deployed.rc == 0, deployed.failure_messages()
        assert "--policy power_of_two" in on_host("b200", "systemctl", "cat", "sglang-router.service")
        assert http_status("b200", f"{ROUTER}/readiness") == 200
        since = on_host("b200", "date", "+%s").strip()
        assert on_host("b200", "python3", "-c", CHAT, ROUTER, "60").split() == ["200"] * 60
        served = {
            port: on_host("b200", "journalctl", "-u", f"sglang-{port}", "--since", f"@{since}", "--no-pager").count(
                "POST /v1/chat/completions"
            )
            for port in range(30000, 30007)
        }
        assert sum(served.values()) == 60 and sum(1 for count in served.values() if count) >= 2, served
    finally:
        restored = run_playbook("deploy.yml", limit="b200")
        assert restored.rc == 0, restored.failure_messages()
