"""Operating the sandbox fleet: status table, Prometheus files, throughput bench, API key, check mode."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from fleet import ROOT, Run, file_digests, http_status, on_host, overlay_inventory, run_playbook, unit_starts

VAULT_PASSWORD = "sandbox-vault-password"
API_KEY = "sk-sandbox-0123456789"


def test_status_table_shows_every_instance_ready_and_sandboxed(sandbox: Run) -> None:
    result = run_playbook("playbooks/status.yml")
    assert result.rc == 0, result.failure_messages()
    table = next(data["res"]["msg"] for data in result.results() if data["task"] == "Show every instance")
    assert table[0].split() == [
        "HOST",
        "INSTANCE",
        "PORT",
        "GPUS",
        "MODEL",
        "SGLANG",
        "SPEC",
        "ACCEPT",
        "HEALTH",
        "UPTIME",
        "RESTARTS",
        "EXPOSURE",
        "URL",
    ]
    rows = [line.split() for line in table[1:]]
    assert [(row[0], row[1]) for row in rows] == [("ct129", "sglang-30000")] + [("b200", f"sglang-{30000 + i}") for i in range(7)]
    for row in rows:
        assert row[5] == "0.5.23" and row[6] == "EAGLE" and row[8] == "ready"
        assert float(row[11]) <= 3.0, "systemd-analyze security exposure of the unit"
        assert row[12] == f"http://127.0.0.1:{row[2]}", "bound to loopback: reachable on the host"


def test_prometheus_targets_and_alert_rules(sandbox: Run, tmp_path: Path) -> None:
    result = run_playbook("playbooks/prometheus.yml", extravars={"sglang_prometheus_dir": str(tmp_path)})
    assert result.rc == 0, result.failure_messages()
    targets = [entry for path in sorted(tmp_path.glob("sglang-targets-*.json")) for entry in json.loads(path.read_text())]
    written = sorted(path.name for path in tmp_path.glob("sglang-targets-*.json"))
    assert written == ["sglang-targets-b200.json", "sglang-targets-ct129.json"]
    jobs = [(entry["labels"]["job"], entry["targets"][0]) for entry in targets]
    assert jobs.count(("sglang-router", "b200:29000")) == 1
    assert sorted(target for job, target in jobs if job == "sglang") == sorted(
        ["ct129:30000"] + [f"b200:{30000 + i}" for i in range(7)]
    )
    rules = yaml.safe_load((tmp_path / "sglang-alerts.yml").read_text())
    alerts = {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    assert set(alerts) == {
        "SGLangInstanceDown",
        "SGLangAcceptLengthCollapsed",
        "SGLangQueueGrowing",
        "SGLangRouterDown",
        "SGLangRouterWorkerUnhealthy",
    }
    metrics = on_host(
        "b200",
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:30001/metrics').read().decode())",
    )
    for name in ("sglang:spec_accept_length", "sglang:num_queue_reqs"):
        assert name in metrics and any(name in expr for expr in alerts.values())
    assert dashboard_hosts(tmp_path) == "/^(ct129|b200)$/"


def dashboard_hosts(directory: Path) -> str:
    """The hosts the written Grafana dashboard offers (its fleet_host variable's regex)."""
    dashboard = json.loads((directory / "sglang-fleet-dashboard.json").read_text())
    [hosts] = [variable for variable in dashboard["templating"]["list"] if variable["name"] == "fleet_host"]
    return str(hosts["regex"])


def test_status_bench_and_prometheus_under_limit_cover_the_visited_hosts_and_keep_the_others_targets(
    sandbox: Run, tmp_path: Path
) -> None:
    ct129_targets = tmp_path / "sglang-targets-ct129.json"
    ct129_targets.write_text("[]\n")  # as an earlier run left it
    prometheus = run_playbook("playbooks/prometheus.yml", limit="b200", extravars={"sglang_prometheus_dir": str(tmp_path)})
    assert prometheus.rc == 0, prometheus.failure_messages()
    assert ct129_targets.read_text() == "[]\n", "a --limit b200 run rewrote ct129's targets"
    b200 = json.loads((tmp_path / "sglang-targets-b200.json").read_text())
    assert len([entry for entry in b200 if entry["labels"]["job"] == "sglang"]) == 7
    assert (tmp_path / "sglang-alerts.yml").is_file()
    assert dashboard_hosts(tmp_path) == "/^(ct129|b200)$/", "the dashboard left out a host --limit did not visit"
    status = run_playbook("playbooks/status.yml", limit="b200")
    assert status.rc == 0, status.failure_messages()
    table = next(data["res"]["msg"] for data in status.results() if data["task"] == "Show every instance")
    assert [line.split()[:2] for line in table[1:]] == [["b200", f"sglang-{30000 + i}"] for i in range(7)]
    bench = run_playbook(
        "playbooks/bench.yml",
        limit="b200",
        extravars={"sglang_bench_dir": str(tmp_path / "bench"), "sglang_bench_requests": 2, "sglang_bench_concurrency": [1]},
    )
    assert bench.rc == 0, bench.failure_messages()
    endpoints = json.loads((tmp_path / "bench/bench.json").read_text())["endpoints"]
    assert [e["name"] for e in endpoints] == [f"b200/sglang-{30000 + i}" for i in range(7)] + ["b200/router"]
    assert (tmp_path / "bench/bench.png").stat().st_size > 0


def test_bench_measures_every_instance_and_the_router(sandbox: Run, tmp_path: Path) -> None:
    result = run_playbook("playbooks/bench.yml", extravars={"sglang_bench_dir": str(tmp_path), "sglang_bench_requests": 4})
    assert result.rc == 0, result.failure_messages()
    endpoints = json.loads((tmp_path / "bench.json").read_text())["endpoints"]
    assert [e["name"] for e in endpoints] == ["ct129/sglang-30000"] + [f"b200/sglang-{30000 + i}" for i in range(7)] + [
        "b200/router"
    ]
    for endpoint in endpoints:
        assert [r["concurrency"] for r in endpoint["results"]] == [1, 8]
        assert all(r["tokens_per_second"] > 0 and r["failed"] == 0 for r in endpoint["results"])
    assert all(e["accept_length"] > 1.0 for e in endpoints if e["name"] != "b200/router")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_api_key_from_vault_protects_the_servers_and_is_never_shown(sandbox: Run, tmp_path: Path) -> None:
    password = tmp_path / "vault-password"
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
    inventory = overlay_inventory(tmp_path)
    (inventory / "group_vars" / "all.yml").write_text((inventory / "group_vars" / "all.yml").read_text() + "\n" + encrypted)
    vault = f"--vault-password-file {password}"
    # The journal since now: the sandbox hosts keep theirs across test sessions.
    since = on_host("b200", "date", "+%Y-%m-%d %H:%M:%S").strip()
    try:
        keyed = run_playbook("deploy.yml", inventory=inventory, cmdline=f"{vault} --diff")
        assert keyed.rc == 0, keyed.failure_messages()
        assert all(API_KEY not in json.dumps(event) for event in keyed.events), "the key appears in the deploy's output"
        listing = on_host(
            "b200",
            "stat",
            "--format=%n %a %U",
            "/etc/sglang-fleet/secrets/sglang-30003.yaml",
            "/etc/sglang-fleet/secrets/router.json",
        )
        assert listing.split("\n")[:2] == [
            "/etc/sglang-fleet/secrets/sglang-30003.yaml 600 sglang",
            "/etc/sglang-fleet/secrets/router.json 600 sglang",
        ]
        assert API_KEY not in on_host("b200", "systemctl", "cat", "sglang-30003.service")
        # The router's keys reach it through its launcher: not in its command line, nor in its environment.
        admin_key = json.loads(on_host("b200", "cat", "/etc/sglang-fleet/secrets/router.json"))["admin_key"]
        assert len(admin_key) == 40 and admin_key != API_KEY
        assert all(admin_key not in json.dumps(event) for event in keyed.events), "the admin key appears in the output"
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
        journal = on_host("b200", "journalctl", "--no-pager", "-o", "cat", f"--since={since}", "-u", "sglang-30003.service")
        assert API_KEY not in journal, "the key reached the journal"
        unit = on_host("b200", "systemctl", "cat", "sglang-30003.service")
        assert "'api_key': '<redacted>'" in journal or "LogFilterPatterns=~api_key" in unit
        assert http_status("b200", "http://127.0.0.1:30003/v1/models") == 401
        assert http_status("b200", "http://127.0.0.1:30003/health_generate") == 200
        status = run_playbook("playbooks/status.yml", inventory=inventory, cmdline=vault)
        assert status.rc == 0 and all(API_KEY not in json.dumps(event) for event in status.events)
        bench = run_playbook(
            "playbooks/bench.yml",
            inventory=inventory,
            cmdline=f"{vault} -vvv",
            extravars={"sglang_bench_dir": str(tmp_path / "bench"), "sglang_bench_requests": 2, "sglang_bench_concurrency": [1]},
        )
        assert bench.rc == 0, bench.failure_messages()
        assert all(API_KEY not in json.dumps(event) for event in bench.events), "the key shows in the bench's -vvv output"
        measured = json.loads((tmp_path / "bench" / "bench.json").read_text())["endpoints"]
        assert all(r["failed"] == 0 for endpoint in measured for r in endpoint["results"]), "the key reached the servers"
    finally:
        restored = run_playbook("deploy.yml")
    assert restored.rc == 0, restored.failure_messages()
    assert http_status("b200", "http://127.0.0.1:30003/v1/models") == 200
    assert on_host("b200", "ls", "/etc/sglang-fleet/secrets") == "router.json\n", "only the router's admin key is left"
    assert json.loads(on_host("b200", "cat", "/etc/sglang-fleet/secrets/router.json"))["api_key"] == ""


def router_status(host: str, path: str, key: str) -> int:
    """HTTP status of a GET of b200's router with a Bearer key, made inside the host."""
    script = (
        "import sys, urllib.request, urllib.error\n"
        "request = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
        "try:\n    print(urllib.request.urlopen(request, timeout=30).status)\n"
        "except urllib.error.HTTPError as error:\n    print(error.code)\n"
    )
    return int(on_host(host, "python3", "-c", script, f"http://127.0.0.1:30100{path}", key).strip())


def test_check_mode_tells_the_truth_and_changes_nothing(sandbox: Run, tmp_path: Path) -> None:
    converged = run_playbook("deploy.yml", cmdline="--check --diff")
    assert converged.rc == 0 and converged.changed_count() == 0, converged.changed()
    before = (file_digests("b200"), unit_starts("b200"))
    token = "hf_token_that_must_not_show"
    overrides = {5: {"server_args": {"max-running-requests": 64}, "environment": {"HF_TOKEN": token}}}
    inventory = overlay_inventory(tmp_path, host_vars={"b200": {"sglang_instance_overrides": overrides}})
    planned = run_playbook("deploy.yml", inventory=inventory, cmdline="--check --diff", limit="b200")
    assert planned.rc == 0, planned.failure_messages()
    results = [data["res"] for data in planned.results() + planned.results("runner_item_on_ok")]
    diffs = [d for res in results for d in res.get("diff", []) if res.get("changed")]
    assert any("--max-running-requests 64" in d.get("after", "") for d in diffs), "the unit diff is shown"
    assert not any(token in json.dumps(res.get("diff", [])) for res in results)
    rolls = [data["res"] for data in planned.results() if data["task"].startswith("Roll the changed running")]
    assert rolls and rolls[0]["would_restart"] == ["sglang-30005"]
    assert (file_digests("b200"), unit_starts("b200")) == before, "check mode changed or restarted something"
