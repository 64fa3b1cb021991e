"""The Prometheus files playbooks/prometheus.yml writes, read by the real promtool (Debian's prometheus package,
installed by scripts/control-packages.sh): the alert rules load, every alert fires and stays quiet as
tests/fixtures/prometheus/sglang-alerts.test.yml says, every series the rules query is one a real exporter answered,
and the labels and jobs the rules name are the ones the file_sd targets give."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_files import (
    CONFIG_TEMPLATE,
    DASHBOARD_TEMPLATE,
    FIXTURES,
    LABEL_PAIR,
    PROMETHEUS_OWN_SERIES,
    ROUTER_RECORDINGS,
    RULES_TEMPLATE,
    TARGETS_TEMPLATE,
    Plan,
    carried_labels,
    playbook_templates,
    promtool,
    queried_jobs,
    queried_series,
    recorded_labels,
    render_as_the_playbook,
    render_sample_targets,
    selector_matchers,
    target_labels,
)

Labels = dict[str, str]

RULES_TESTS = FIXTURES / "sglang-alerts.test.yml"


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    """The alert rules, rendered to tmp_path under the name the playbook gives them."""
    return render_as_the_playbook(RULES_TEMPLATE, tmp_path / Path(playbook_templates()[RULES_TEMPLATE]).name)


@pytest.fixture
def targets_file(tmp_path: Path, plan: Plan) -> Path:
    """SAMPLE_HOST's file_sd targets for its planned instances (served as SAMPLE_MODEL) and router."""
    return render_sample_targets(tmp_path, plan)


# -- reading rules and the rules test ----------------------------------------------------------------------------------


def alert_rules(rules_file: Path) -> list[dict[str, Any]]:
    """Every alerting rule of the rendered file, all groups together."""
    rules = yaml.safe_load(rules_file.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def parse_series(series: str) -> tuple[str, Labels]:
    """A promtool input series, `name{labels}` or `{__name__="name", labels}`: its name and its other labels."""
    name, _, rest = series.partition("{")
    labels = dict(LABEL_PAIR.findall(rest))
    return labels.pop("__name__", name.strip()), labels


def rules_tests() -> list[dict[str, Any]]:
    """The test groups of sglang-alerts.test.yml."""
    tests: list[dict[str, Any]] = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    return tests


# -- the tests ---------------------------------------------------------------------------------------------------------


def test_the_tests_render_the_files_the_playbook_writes() -> None:
    """The templates rendered here (rules, targets) and in test_grafana_dashboard.py (the dashboard) are the playbook's
    template tasks, and no other."""
    assert set(playbook_templates()) == {RULES_TEMPLATE, TARGETS_TEMPLATE, DASHBOARD_TEMPLATE, CONFIG_TEMPLATE}


def test_promtool_accepts_the_configuration_and_the_rules_it_names(rules_file: Path) -> None:
    """`promtool check config` loads the rendered prometheus.yml and the rule file it names (side by side in
    sglang_prometheus_dir, as the playbook writes them). A running Prometheus reads it in the integration suite."""
    directory = rules_file.parent
    config = render_as_the_playbook(
        CONFIG_TEMPLATE, directory / Path(playbook_templates()[CONFIG_TEMPLATE]).name, sglang_prometheus_dir=str(directory)
    )
    result = promtool("check", "config", config.name, cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout
    assert f"SUCCESS: {len(alert_rules(rules_file))} rules found" in result.stdout


def test_promtool_accepts_the_rendered_rules(rules_file: Path) -> None:
    """`promtool check rules` loads every rule of the rendered file, without an error or a lint finding (every lint
    check, fatal)."""
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", rules_file.name, cwd=rules_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules(rules_file))} rules found" in result.stdout


def test_every_alert_fires_and_stays_quiet_as_the_rules_test_says(rules_file: Path) -> None:
    """`promtool test rules` passes every case of sglang-alerts.test.yml against the rendered rules: labels, annotations
    with their rendered instance names and values, and no alert where none is expected."""
    shutil.copy(RULES_TESTS, rules_file.parent / RULES_TESTS.name)
    result = promtool("test", "rules", RULES_TESTS.name, cwd=rules_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_test_makes_every_alert_fire_and_keeps_every_alert_quiet(rules_file: Path) -> None:
    """Each alert of the rendered rules has a case where it fires and a case where it must not."""
    cases = [case for test in rules_tests() for case in test["alert_rule_test"]]
    for alert in (rule["alert"] for rule in alert_rules(rules_file)):
        outcomes = [bool(case["exp_alerts"]) for case in cases if case["alertname"] == alert]
        assert True in outcomes, f"no case where {alert} fires"
        assert False in outcomes, f"no case where {alert} stays quiet"


def test_every_series_the_rules_query_is_one_a_real_exporter_answered(rules_file: Path) -> None:
    """Each series name in the rules' expressions is in a recording of real SGLang 0.5.17 (sglang:*) or real
    smg 1.13.0 (smg_*), or is Prometheus' own `up`."""
    known = set(recorded_labels()) | PROMETHEUS_OWN_SERIES
    for rule in alert_rules(rules_file):
        queried = queried_series(rule["expr"])
        assert queried, f"{rule['alert']}: no series found in {rule['expr']!r}"
        assert queried <= known, f"{rule['alert']}: never recorded: {sorted(queried - known)}"


def test_the_router_keeps_an_unhealthy_workers_health_series_at_zero() -> None:
    """What SGLangRouterWorkerUnhealthy relies on, as recorded: smg 1.13.0 reports a failing (stopped) worker as
    smg_worker_health{worker=<url>} 0 (the series stays) and a healthy one as 1."""
    health = re.compile(r'^smg_worker_health\{worker="([^"]+)"\} (\S+)$', re.MULTILINE)
    values = {path.name: dict(health.findall(path.read_text())) for path in ROUTER_RECORDINGS}
    assert values == {
        "metrics.healthy.txt": {"http://127.0.0.1:31000": "1", "http://127.0.0.1:31001": "1"},
        "metrics.unhealthy.txt": {"http://127.0.0.1:31000": "1", "http://127.0.0.1:31001": "0"},
    }


def test_the_rules_test_series_carry_what_the_exporters_and_the_targets_give(targets_file: Path) -> None:
    """Every input series of sglang-alerts.test.yml has exactly the labels Prometheus would store: the exporter's own
    (as recorded) plus its job's file_sd target labels and the address."""
    exported = recorded_labels()
    by_job = target_labels(targets_file)
    for test in rules_tests():
        for series in test["input_series"]:
            name, labels = parse_series(series["series"])
            assert name in exported or name in PROMETHEUS_OWN_SERIES, f"{test['name']}: {name} was never recorded"
            own = exported.get(name, set())
            assert set(labels) == own | by_job[labels["job"]], f"{test['name']}: {series['series']}"


def test_the_labels_and_jobs_the_rules_name_come_from_the_targets(rules_file: Path, targets_file: Path) -> None:
    """The jobs a rule's series come from are jobs of the rendered targets, and every label the rule selects on or
    prints ($labels.<name>) is one its series carry: a target label of those jobs or the exporter's own."""
    by_job = target_labels(targets_file)
    for rule in alert_rules(rules_file):
        jobs = queried_jobs(rule["expr"])
        assert jobs and jobs <= set(by_job), f"{rule['alert']}: jobs {sorted(jobs)}, targets have {sorted(by_job)}"
        carried = carried_labels(rule["expr"], by_job)
        selected = {name for name, _ in selector_matchers(rule["expr"])}
        named = selected | set(re.findall(r"\$labels\.(\w+)", json.dumps(rule.get("annotations", {}))))
        assert named <= carried, f"{rule['alert']}: labels no series carries: {sorted(named - carried)}"


def test_prometheus_accepts_the_targets_and_the_rules_together(rules_file: Path, targets_file: Path) -> None:
    """`promtool check config` with a scrape job reading file_sd targets as the README says (sglang-targets-*.json, the
    rendered file) and the rendered rules: the target file parses and every label name and value is valid."""
    directory = rules_file.parent
    assert sorted(directory.glob("sglang-targets-*.json")) == [targets_file]
    config = {
        "rule_files": [rules_file.name],
        "scrape_configs": [{"job_name": "sglang-fleet", "file_sd_configs": [{"files": ["sglang-targets-*.json"]}]}],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", "prometheus.yml", cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("router_bind", "gateway_bind", "router_target", "gateway_target"),
    [
        (None, None, "10.0.0.5:29000", "10.0.0.5:29200"),
        ("0.0.0.0", "::", "10.0.0.5:29000", "10.0.0.5:29200"),
        ("127.0.0.1", "::1", "10.0.0.5:29000", "10.0.0.5:29200"),
        ("192.168.7.5", "fd00::5", "192.168.7.5:29000", "[fd00::5]:29200"),
    ],
)
def test_an_exporter_on_an_address_of_its_own_is_scraped_there(
    tmp_path: Path, router_bind: str | None, gateway_bind: str | None, router_target: str, gateway_target: str
) -> None:
    """sglang_router_prometheus_host / sglang_gateway_prometheus_host put the metrics (no key) on another address than
    the clients'; Prometheus scrapes that address, and the host's own where the exporter listens everywhere or on
    loopback."""
    host_vars: dict[str, Any] = {"ansible_host": "10.0.0.5", "sglang_instances": [], "sglang_router_enabled": True}
    host_vars |= {"sglang_router_prometheus_host": router_bind} if router_bind else {}
    host_vars |= {"sglang_gateway_prometheus_host": gateway_bind} if gateway_bind else {}
    rendered = render_as_the_playbook(
        TARGETS_TEMPLATE, tmp_path / "t.json", inventory_hostname="h", hostvars={"h": host_vars}, sglang_gateway_hosts=["h"]
    )
    jobs = {target["labels"]["job"]: target["targets"] for target in json.loads(rendered.read_text())}
    assert jobs == {"sglang-router": [router_target], "sglang-gateway": [gateway_target]}
