"""Operating the sandbox fleet: status table, Prometheus files, throughput bench, check mode."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from fleet import Run, changed_diffs, file_digests, on_host, overlay_inventory, run_playbook, unit_starts


def test_status_table_shows_every_instance_ready_and_sandboxed(sandbox: Run) -> None:
    result = run_playbook("playbooks/status.yml")
    assert result.rc == 0, result.failure_messages()
    table = next(data["res"]["msg"] for data in result.results() if data["task"].startswith("Show every instance"))
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
        "STARTUP",
        "URL",
    ]
    rows = [line.split() for line in table[1:-1]]
    assert [(row[0], row[1]) for row in rows] == [
        ("ct129", "sglang-30000"),
        *[("b200", f"sglang-{30000 + i}") for i in range(7)],
        ("b200", "router"),
    ]
    for row in rows:
        assert row[8] == "ready"
        assert float(row[11]) <= 3.0, "systemd-analyze security exposure of the unit"
        assert row[13:] == [f"http://127.0.0.1:{row[2]}", "(on", f"{row[0]}", "only)"], "bound to loopback: on the host only"
    for row in rows[:-1]:
        assert row[5] == "0.5.23" and row[6] == "EAGLE"
    assert table[-1].startswith("A URL marked (on HOST only) listens on that host's loopback: reach it there, e.g. docker exec")


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
        "SGLangGatewayDown",
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
    table = next(data["res"]["msg"] for data in status.results() if data["task"].startswith("Show every instance"))
    listed = [line.split()[:2] for line in table[1:-1]]
    assert listed == [["b200", f"sglang-{30000 + i}"] for i in range(7)] + [["b200", "router"]]
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
    diffs = changed_diffs(results)
    assert any("--max-running-requests 64" in d.get("after", "") for d in diffs), "the unit diff is shown"
    assert not any(token in json.dumps(res.get("diff", [])) for res in results)
    rolls = [data["res"] for data in planned.results() if data["task"].startswith("Roll the changed running")]
    assert rolls and rolls[0]["would_restart"] == ["sglang-30005"]
    assert (file_digests("b200"), unit_starts("b200")) == before, "check mode changed or restarted something"
