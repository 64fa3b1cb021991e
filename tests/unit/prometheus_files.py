"""What the tests of playbooks/prometheus.yml's files share (test_prometheus_rules.py, test_grafana_dashboard.py): its
templates rendered as the playbook renders them, the real promtool, the series and labels real exporters answered, and
the series, labels and jobs a PromQL expression names."""

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
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, generate_ansible_template_vars, trust_as_template
from ansible_collections.sglang.fleet.plugins.action.sglang_instance_files import OVERRIDES
from fleet import ROOT

Plan = Callable[..., dict[str, Any]]

PLAYBOOK = ROOT / "playbooks/prometheus.yml"
RULES_TEMPLATE = "prometheus/sglang-alerts.yml.j2"
TARGETS_TEMPLATE = "prometheus/sglang-targets.json.j2"
DASHBOARD_TEMPLATE = "prometheus/sglang-fleet-dashboard.json.j2"
CONFIG_TEMPLATE = "prometheus/prometheus.yml.j2"
FIXTURES = ROOT / "tests/fixtures/prometheus"
# What real exporters answered on /metrics: SGLang 0.5.17 on an H200 (four scrapes, with and without speculative
# decoding) and the gateway the fleet runs, smg 1.13.0, with two healthy workers and with one of them stopped
# (tests/recordings/smg-1.13.0/README.md).
SGLANG_RECORDINGS = [
    *sorted((ROOT / "tests/recordings/sglang-0.5.17-h200").glob("metrics.*.txt")),
    # after an in-place weight update: sglang:weight_load_duration_seconds (issue 42)
    ROOT / "tests/recordings/sglang-0.5.17-h100-restarts/servers/cold/metrics.after_update.rev2.txt",
]
ROUTER_RECORDINGS = sorted((ROOT / "tests/recordings/smg-1.13.0").glob("metrics.*.txt"))
# Series Prometheus writes itself for every target; no exporter answers them.
PROMETHEUS_OWN_SERIES = {"up"}
# The label Prometheus adds to every target besides those file_sd gives: its address.
ADDRESS_LABEL = "instance"
# The host whose targets the tests render: seven instances, a router (inventory/production/host_vars/b200.yml) and a
# fleet gateway.
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


def play_vars() -> dict[str, Any]:
    """The variables playbooks/prometheus.yml sets for its play (its defaults: the output folder, the alert
    thresholds)."""
    variables: dict[str, Any] = yaml.safe_load(PLAYBOOK.read_text())[0]["vars"]
    return variables


def render_as_the_playbook(src: str, dest: Path, **variables: Any) -> Path:
    """Write `src` to `dest` as the playbook's template task does: Ansible's own templar with the play's variables
    (its defaults: the alert thresholds), ansible_managed and the template action's defaults (OVERRIDES)."""
    assert src in playbook_templates(), f"playbooks/prometheus.yml renders no {src}"
    loader = DataLoader()
    source = ROOT / "templates" / src
    playbook_vars = loader.load_from_file(str(PLAYBOOK))[0]["vars"]
    template_vars = generate_ansible_template_vars(path=src, fullpath=str(source), dest_path=str(dest))
    templar = Templar(loader=loader, variables={**playbook_vars, **variables, **template_vars})
    text = templar.template(trust_as_template(source.read_text()), escape_backslashes=False, overrides=OVERRIDES)
    dest.write_text(str(text))
    return dest


def render_sample_targets(directory: Path, plan: Plan) -> Path:
    """SAMPLE_HOST's file_sd targets for its planned instances (served as SAMPLE_MODEL) and router, written to
    `directory` under the name the playbook gives them."""
    host_vars = {
        **yaml.safe_load((ROOT / f"inventory/production/host_vars/{SAMPLE_HOST}.yml").read_text()),
        "sglang_instances": plan(SAMPLE_HOST, sglang_served_model_name=SAMPLE_MODEL)["instances"],
    }
    return render_as_the_playbook(
        TARGETS_TEMPLATE,
        directory / f"sglang-targets-{SAMPLE_HOST}.json",
        inventory_hostname=SAMPLE_HOST,
        hostvars={SAMPLE_HOST: host_vars},
        # The sample host runs the fleet gateway too, so its targets have every job.
        sglang_gateway_hosts=[SAMPLE_HOST],
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


# -- recordings and PromQL ---------------------------------------------------------------------------------------------


def exported_labels(recordings: Iterable[Path]) -> dict[str, set[str]]:
    """series name -> the label names its samples carry, over every sample line of the recordings."""
    found: dict[str, set[str]] = {}
    for path in recordings:
        for line in path.read_text().splitlines():
            sample = SAMPLE_LINE.match(line)
            if sample:
                found.setdefault(sample.group(1), set()).update(name for name, _ in LABEL_PAIR.findall(sample.group(2) or ""))
    return found


def recorded_labels() -> dict[str, set[str]]:
    """exported_labels over every recording, SGLang's and the router's."""
    return exported_labels(SGLANG_RECORDINGS) | exported_labels(ROUTER_RECORDINGS)


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


def queried_jobs(expr: str) -> set[str]:
    """The jobs whose targets an expression's series come from: those it selects by name, and those exporting its
    series."""
    selected = {value for name, value in selector_matchers(expr) if name == "job"}
    exporting = {job for name in queried_series(expr) for prefix, job in EXPORTER_JOBS.items() if name.startswith(prefix)}
    return selected | exporting


def carried_labels(expr: str, by_job: dict[str, set[str]]) -> set[str]:
    """The label names the series of an expression carry in Prometheus: the target labels of the jobs they come from
    (`by_job`, from target_labels) and the exporter's own labels, as recorded."""
    exported = recorded_labels()
    carried = {label for job in queried_jobs(expr) for label in by_job.get(job, set())}
    return carried | {label for name in queried_series(expr) for label in exported.get(name, set())}
