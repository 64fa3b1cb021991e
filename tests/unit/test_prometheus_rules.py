"""The Prometheus files playbooks/prometheus.yml writes, read by the real promtool (Debian's prometheus package,
installed by scripts/control-packages.sh): the alert rules load, every alert fires and stays quiet as
tests/fixtures/prometheus/sglang-alerts.test.yml says, every series the rules query is one a real exporter answered,
and the labels and jobs the rules name are the ones the file_sd targets give."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible._internal._templating import _template_vars
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.sglang.fleet.plugins.action.sglang_instance_files import OVERRIDES
from fleet import ROOT

Plan = Callable[..., dict[str, Any]]
Labels = dict[str, str]

PLAYBOOK = ROOT / "playbooks/prometheus.yml"
RULES_TEMPLATE = "prometheus/sglang-alerts.yml.j2"
TARGETS_TEMPLATE = "prometheus/sglang-targets.json.j2"
FIXTURES = ROOT / "tests/fixtures/prometheus"
RULES_TESTS = FIXTURES / "sglang-alerts.test.yml"
# What real exporters answered on /metrics: SGLang 0.5.17 on an H200 (four scrapes, with and without speculative
# decoding) and sglang-router 0.3.2 with a healthy and an unhealthy worker (FIXTURES/README.md).
SGLANG_RECORDINGS = sorted((ROOT / "tests/recordings/sglang-0.5.17-h200").glob("metrics.*.txt"))
ROUTER_RECORDINGS = sorted(FIXTURES.glob("sglang-router-0.3.2.*.txt"))
# Series Prometheus writes itself for every target; no exporter answers them.
PROMETHEUS_OWN_SERIES = {"up"}
# The label Prometheus adds to every target besides those file_sd gives: its address.
ADDRESS_LABEL = "instance"
# The host whose targets the tests render: seven instances and a router (inventory/production/host_vars/b200.yml).
SAMPLE_HOST = "b200"
SAMPLE_MODEL = "qwen3.6-27b"
# The job whose targets export each family of series (templates/prometheus/sglang-targets.json.j2).
EXPORTER_JOBS = {"sglang:": "sglang", "smg_": "sglang-router"}
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=~?\s*"((?:[^"\\]|\\.)*)"')


# -- rendering, as the playbook's template tasks do ------------------------------------------------------------------


def playbook_templates() -> dict[str, str]:
    """src -> dest of every ansible.builtin.template task of playbooks/prometheus.yml."""
    play = yaml.safe_load(PLAYBOOK.read_text())[0]
    tasks = [task["ansible.builtin.template"] for task in play["tasks"] if "ansible.builtin.template" in task]
    return {task["src"]: task["dest"] for task in tasks}


def render_as_the_playbook(src: str, dest: Path, **variables: Any) -> Path:
    """Write `src` to `dest` as the playbook's template task does: Ansible's own templar with the play's variables
    (its defaults: the alert thresholds), ansible_managed and the template action's defaults (OVERRIDES)."""
    assert src in playbook_templates(), f"playbooks/prometheus.yml renders no {src}"
    loader = DataLoader()
    source = ROOT / "templates" / src
    play_vars = loader.load_from_file(str(PLAYBOOK))[0]["vars"]
    template_vars = _template_vars.generate_ansible_template_vars(
        path=src, fullpath=str(source), dest_path=str(dest), include_ansible_managed=True
    )
    templar = Templar(loader=loader, variables={**play_vars, **variables, **template_vars})
    text = templar.template(trust_as_template(source.read_text()), escape_backslashes=False, overrides=OVERRIDES)
    dest.write_text(str(text))
    return dest


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    """The alert rules, rendered to tmp_path under the name the playbook gives them."""
    return render_as_the_playbook(RULES_TEMPLATE, tmp_path / Path(playbook_templates()[RULES_TEMPLATE]).name)


@pytest.fixture
def targets_file(tmp_path: Path, plan: Plan) -> Path:
    """SAMPLE_HOST's file_sd targets for its planned instances (served as SAMPLE_MODEL) and router."""
    host_vars = {
        **yaml.safe_load((ROOT / f"inventory/production/host_vars/{SAMPLE_HOST}.yml").read_text()),
        "sglang_instances": plan(SAMPLE_HOST, sglang_served_model_name=SAMPLE_MODEL)["instances"],
    }
    return render_as_the_playbook(
        TARGETS_TEMPLATE,
        tmp_path / f"sglang-targets-{SAMPLE_HOST}.json",
        inventory_hostname=SAMPLE_HOST,
        hostvars={SAMPLE_HOST: host_vars},
    )


def target_labels(targets_file: Path) -> dict[str, set[str]]:
    """job -> the names of the labels its targets carry in Prometheus: file_sd's (an empty value is no label) and the
    address."""
    by_job: dict[str, set[str]] = {}
    for group in json.loads(targets_file.read_text()):
        names = {name for name, value in group["labels"].items() if value}
        by_job.setdefault(group["labels"]["job"], set()).update(names | {ADDRESS_LABEL})
    return by_job


# -- promtool ----------------------------------------------------------------------------------------------------------


def promtool(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """promtool run with `arguments` in `cwd`; the test fails, never skips, where promtool is missing."""
    executable = shutil.which("promtool")
    if executable is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (scripts/control-packages.sh, run by make venv)")
    return subprocess.run([executable, *arguments], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


# -- reading rules, recordings and the rules test ----------------------------------------------------------------------


def alert_rules(rules_file: Path) -> list[dict[str, Any]]:
    """Every alerting rule of the rendered file, all groups together."""
    rules = yaml.safe_load(rules_file.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def queried_series(expr: str) -> set[str]:
    """The series names a PromQL expression selects: its identifiers, less functions, keywords, label matchers,
    ranges and the label lists of by/on clauses."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    names = re.findall(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()", bare)
    return {name for name in names if name not in PROMQL_WORDS}


def selector_matchers(expr: str) -> list[tuple[str, str]]:
    """(label, value) of every matcher in the expression's selectors."""
    return [pair for selector in re.findall(r"\{([^}]*)\}", expr) for pair in LABEL_PAIR.findall(selector)]


def rule_jobs(expr: str) -> set[str]:
    """The jobs whose targets a rule's series come from: those it selects by name, and those exporting its series."""
    selected = {value for name, value in selector_matchers(expr) if name == "job"}
    exporting = {job for name in queried_series(expr) for prefix, job in EXPORTER_JOBS.items() if name.startswith(prefix)}
    return selected | exporting


def exported_labels(recordings: Iterable[Path]) -> dict[str, set[str]]:
    """series name -> the label names its samples carry, over every sample line of the recordings."""
    found: dict[str, set[str]] = {}
    for path in recordings:
        for line in path.read_text().splitlines():
            sample = SAMPLE_LINE.match(line)
            if sample:
                found.setdefault(sample.group(1), set()).update(name for name, _ in LABEL_PAIR.findall(sample.group(2) or ""))
    return found


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


def test_the_test_renders_the_files_the_playbook_writes() -> None:
    """The two templates rendered here are the playbook's template tasks, and no other."""
    assert set(playbook_templates()) == {RULES_TEMPLATE, TARGETS_TEMPLATE}


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
    sglang-router 0.3.2 (smg_*), or is Prometheus' own `up`."""
    known = set(exported_labels(SGLANG_RECORDINGS)) | set(exported_labels(ROUTER_RECORDINGS)) | PROMETHEUS_OWN_SERIES
    for rule in alert_rules(rules_file):
        queried = queried_series(rule["expr"])
        assert queried, f"{rule['alert']}: no series found in {rule['expr']!r}"
        assert queried <= known, f"{rule['alert']}: never recorded: {sorted(queried - known)}"


def test_the_router_keeps_an_unhealthy_workers_health_series_at_zero() -> None:
    """What SGLangRouterWorkerUnhealthy relies on, as recorded: sglang-router 0.3.2 reports a failing worker as
    smg_worker_health{worker=<url>} 0 (the series stays) and a healthy one as 1."""
    health = re.compile(r'^smg_worker_health\{worker="[^"]+"\} (\S+)$', re.MULTILINE)
    values = {path.name: health.findall(path.read_text()) for path in ROUTER_RECORDINGS}
    assert values == {"sglang-router-0.3.2.healthy.txt": ["1"], "sglang-router-0.3.2.unhealthy.txt": ["0"]}


def test_the_rules_test_series_carry_what_the_exporters_and_the_targets_give(targets_file: Path) -> None:
    """Every input series of sglang-alerts.test.yml has exactly the labels Prometheus would store: the exporter's own
    (as recorded) plus its job's file_sd target labels and the address."""
    exported = exported_labels(SGLANG_RECORDINGS) | exported_labels(ROUTER_RECORDINGS)
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
    exported = exported_labels(SGLANG_RECORDINGS) | exported_labels(ROUTER_RECORDINGS)
    for rule in alert_rules(rules_file):
        jobs = rule_jobs(rule["expr"])
        assert jobs and jobs <= set(by_job), f"{rule['alert']}: jobs {sorted(jobs)}, targets have {sorted(by_job)}"
        carried = {label for job in jobs for label in by_job[job]}
        carried |= {label for name in queried_series(rule["expr"]) for label in exported.get(name, set())}
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
