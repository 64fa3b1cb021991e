"""The Grafana dashboard playbooks/prometheus.yml writes (templates/prometheus/sglang-fleet-dashboard.json.j2), rendered
as the playbook renders it: Grafana's dashboard JSON model, with a Prometheus datasource variable and label variables,
every panel on the grid and queried; every query parses with the real promtool, selects only series that real SGLang
0.5.17 and the gateway smg 1.13.0 exported, and names only labels those series or the file_sd targets carry; the host
variable offers the inventory's hosts and no other, and the dashed lines are the alert rules' thresholds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import ROOT
from prometheus_files import (
    ADDRESS_LABEL,
    DASHBOARD_TEMPLATE,
    PROMETHEUS_OWN_SERIES,
    SGLANG_RECORDINGS,
    Plan,
    carried_labels,
    play_vars,
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

Dashboard = dict[str, Any]

INVENTORY_HOSTS = ROOT / "inventory/production/hosts.yml"
# The group the playbook runs on; the dashboard's host variable offers its hosts.
FLEET_GROUP = "sglang_servers"
# Every panel and query variable reads Prometheus through the dashboard's datasource variable.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
LABEL_VARIABLES = ("fleet_host", "model", "sglang_instance")
# Grafana's own variables the queries may use, and a value Grafana could give them.
GRAFANA_VARIABLES = {"__rate_interval": "5m"}
# Any value of a label variable, as Grafana's "All" selects.
ALL = ".+"
GRID_COLUMNS = 24
VARIABLE_REFERENCE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
LABEL_VALUES_QUERY = re.compile(r"^label_values\((?P<selector>.+), (?P<label>\w+)\)$")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
GROUPING_CLAUSE = re.compile(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)")
HOST_VARIABLE_REGEX = re.compile(r"^/(.*)/$")
ACCEPT_LENGTH_PANEL = "Speculative accept length"
QUEUE_PANEL = "Queued requests"


# -- rendering ---------------------------------------------------------------------------------------------------------


def inventory_hosts() -> list[str]:
    """The hosts of FLEET_GROUP in the production inventory."""
    return list(yaml.safe_load(INVENTORY_HOSTS.read_text())[FLEET_GROUP]["hosts"])


def render_dashboard(directory: Path, **variables: Any) -> Path:
    """The dashboard rendered into `directory` under the name the playbook gives it, for the production inventory's
    groups, with `variables` set as -e would."""
    dest = directory / Path(playbook_templates()[DASHBOARD_TEMPLATE]).name
    return render_as_the_playbook(DASHBOARD_TEMPLATE, dest, groups={FLEET_GROUP: inventory_hosts()}, **variables)


@pytest.fixture
def dashboard_file(tmp_path: Path) -> Path:
    """The dashboard, rendered with the play's defaults."""
    return render_dashboard(tmp_path)


@pytest.fixture
def dashboard(dashboard_file: Path) -> Dashboard:
    """The rendered dashboard, parsed."""
    parsed: Dashboard = json.loads(dashboard_file.read_text())
    return parsed


@pytest.fixture
def targets_file(tmp_path: Path, plan: Plan) -> Path:
    """SAMPLE_HOST's file_sd targets for its planned instances and router."""
    return render_sample_targets(tmp_path, plan)


# -- reading the dashboard ---------------------------------------------------------------------------------------------


def panel(dashboard: Dashboard, title: str) -> dict[str, Any]:
    """The dashboard's panel of that title."""
    found: list[dict[str, Any]] = [candidate for candidate in dashboard["panels"] if candidate["title"] == title]
    assert len(found) == 1, f"{len(found)} panels titled {title!r}"
    return found[0]


def variables(dashboard: Dashboard) -> dict[str, dict[str, Any]]:
    """name -> templating variable."""
    return {variable["name"]: variable for variable in dashboard["templating"]["list"]}


def panel_targets(dashboard: Dashboard) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, target) of every panel query; where names the panel and the query's refId."""
    for each in dashboard["panels"]:
        for target in each["targets"]:
            yield f"panel {each['title']!r} {target.get('refId')}", target


def variable_selector(variable: dict[str, Any]) -> str:
    """The series selector of a label_values(<selector>, <label>) variable query."""
    query = LABEL_VALUES_QUERY.match(variable["query"]["query"])
    assert query, f"variable {variable['name']}: not label_values(<selector>, <label>): {variable['query']['query']!r}"
    return query["selector"]


def queries(dashboard: Dashboard) -> dict[str, str]:
    """where -> PromQL expression, for every panel query and every label variable's selector."""
    found = {where: target["expr"] for where, target in panel_targets(dashboard)}
    found.update({f"variable {name}": variable_selector(variables(dashboard)[name]) for name in LABEL_VARIABLES})
    return found


def used_variables(expr: str) -> set[str]:
    """The names of the Grafana variables an expression uses ($name or ${name})."""
    return {braced or bare for braced, bare in VARIABLE_REFERENCE.findall(expr)}


def substitute_variables(expr: str, values: dict[str, str]) -> str:
    """The expression as Grafana sends it to Prometheus, each variable replaced by its value in `values`; the test
    fails on a variable `values` lacks."""

    def value(reference: re.Match[str]) -> str:
        name = reference[1] or reference[2]
        if name not in values:
            pytest.fail(f"no value for ${name} in {expr!r}")
        return values[name]

    return VARIABLE_REFERENCE.sub(value, expr)


def sample_values(targets_file: Path) -> dict[str, str]:
    """One value of each label variable, those of an instance of the rendered targets, and Grafana's own variables."""
    instance = next(group["labels"] for group in json.loads(targets_file.read_text()) if group["labels"]["job"] == "sglang")
    return {name: instance[name] for name in LABEL_VARIABLES} | GRAFANA_VARIABLES


def grouping_labels(expr: str) -> set[str]:
    """The labels of the expression's by/without/on/ignoring clauses."""
    return {label.strip() for _, labels in GROUPING_CLAUSE.findall(expr) for label in labels.split(",") if label.strip()}


def aggregated_by(expr: str) -> set[str] | None:
    """The labels an aggregation keeps (its `by` clauses), or None where the expression aggregates nothing away."""
    kept = [labels for clause, labels in GROUPING_CLAUSE.findall(expr) if clause == "by"]
    return {label.strip() for labels in kept for label in labels.split(",")} if kept else None


def overlap(first: dict[str, int], second: dict[str, int]) -> bool:
    """Whether two gridPos rectangles share a cell."""
    return (
        first["x"] < second["x"] + second["w"]
        and second["x"] < first["x"] + first["w"]
        and first["y"] < second["y"] + second["h"]
        and second["y"] < first["y"] + first["h"]
    )


def threshold_value(each: dict[str, Any], color: str) -> float:
    """The value from which a panel's thresholds turn `color` (its dashed line)."""
    steps = each["fieldConfig"]["defaults"]["thresholds"]["steps"]
    values = [step["value"] for step in steps if step["color"] == color]
    assert len(values) == 1, f"{each['title']}: {steps}"
    return float(values[0])


# -- recordings, as promtool input series ------------------------------------------------------------------------------


def recorded_sample(recording: str, name: str) -> tuple[str, str]:
    """The labels (`k="v",...`) and value of the one sample of `name` in tests/recordings/.../metrics.<recording>.txt."""
    path = next(path for path in SGLANG_RECORDINGS if path.name == f"metrics.{recording}.txt")
    samples = re.findall(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", path.read_text(), re.MULTILINE)
    assert len(samples) == 1, f"{path.name}: {len(samples)} samples of {name}"
    labels, value = samples[0]
    return labels, value


def as_scraped(labels: str, target: dict[str, Any]) -> str:
    """An exporter's labels with those Prometheus adds from the file_sd target: its labels and its address."""
    added = {**target["labels"], ADDRESS_LABEL: target["targets"][0]}
    return labels + "".join(f', {name}="{value}"' for name, value in added.items())


def scraped_series(recording: str, target: dict[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    """promtool input series -> value: the recorded samples of `names`, as Prometheus stores them scraped from
    `target`."""
    series = {}
    for name in names:
        labels, value = recorded_sample(recording, name)
        series[f"{name}{{{as_scraped(labels, target)}}}"] = value
    return series


# -- the tests ---------------------------------------------------------------------------------------------------------


def test_the_dashboard_is_grafanas_dashboard_json(dashboard: Dashboard) -> None:
    """The rendered file is JSON with the fields of Grafana's dashboard model: a stable uid, a title, a schemaVersion
    whose panels name their datasource as an object (36 and later), panels and templating; and ansible_managed in its
    description (JSON has no comments)."""
    assert isinstance(dashboard["uid"], str) and dashboard["uid"]
    assert dashboard["title"] and dashboard["id"] is None
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["panels"] and isinstance(dashboard["templating"]["list"], list)
    assert dashboard["description"].startswith("Ansible managed")


def test_the_panels_sit_on_the_grid_without_overlapping(dashboard: Dashboard) -> None:
    """Every panel has a unique id and a gridPos inside Grafana's 24 columns, and no two panels share a cell."""
    ids = [each["id"] for each in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    positions = {each["title"]: each["gridPos"] for each in dashboard["panels"]}
    for title, position in positions.items():
        assert all(isinstance(position[key], int) for key in ("x", "y", "w", "h")), title
        assert position["x"] >= 0 and position["w"] > 0 and position["x"] + position["w"] <= GRID_COLUMNS, title
    for (first, a), (second, b) in combinations(positions.items(), 2):
        assert not overlap(a, b), f"{first!r} and {second!r} overlap"


def test_prometheus_is_read_through_the_datasource_variable(dashboard: Dashboard) -> None:
    """A variable of type datasource offers the Prometheus data sources, and every panel, every query and every query
    variable reads the one it selects."""
    datasource = variables(dashboard)["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for each in dashboard["panels"]:
        assert each["datasource"] == DATASOURCE, each["title"]
    for where, target in panel_targets(dashboard):
        assert target["datasource"] == DATASOURCE, where
    for name in LABEL_VARIABLES:
        assert variables(dashboard)[name]["datasource"] == DATASOURCE, name


def test_the_label_variables_are_label_values_of_recorded_series(dashboard: Dashboard) -> None:
    """fleet_host, model and sglang_instance are query variables, label_values(<recorded series>, <their own label>),
    each offering several values and All."""
    for name in LABEL_VARIABLES:
        variable = variables(dashboard)[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"], name
        query = LABEL_VALUES_QUERY.match(variable["query"]["query"])
        assert query and query["label"] == name, variable["query"]
        assert variable["definition"] == variable["query"]["query"], name
        assert queried_series(query["selector"]) <= set(recorded_labels()), variable["query"]


def test_the_host_variable_offers_the_inventorys_hosts_and_no_other(dashboard: Dashboard) -> None:
    """The host variable's regex (Grafana's /.../ form) matches each host of the inventory's sglang_servers whole, and
    no name that merely contains or extends one."""
    regex = HOST_VARIABLE_REGEX.match(variables(dashboard)["fleet_host"]["regex"])
    assert regex, variables(dashboard)["fleet_host"]["regex"]
    hosts = inventory_hosts()
    assert hosts
    for host in hosts:
        assert re.search(regex[1], host), host
        for stranger in (f"{host}x", f"x{host}", host[:-1]):
            assert stranger in hosts or not re.search(regex[1], stranger), stranger


def test_every_panel_queries_something_and_names_each_line_by_instance(dashboard: Dashboard) -> None:
    """Each panel has at least one query, each query an expression and a refId unique in its panel, and a legend that
    names the host, and the instance where the query reads instances (job sglang)."""
    for each in dashboard["panels"]:
        assert each["targets"], f"panel {each['title']!r} has no query"
        ref_ids = [target["refId"] for target in each["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), each["title"]
    for where, target in panel_targets(dashboard):
        assert target["expr"].strip(), where
        legend = set(LEGEND_LABEL.findall(target["legendFormat"]))
        assert "fleet_host" in legend, where
        assert "sglang" not in queried_jobs(target["expr"]) or "sglang_instance" in legend, where


def test_every_variable_a_query_uses_is_the_dashboards_or_grafanas(dashboard: Dashboard) -> None:
    """The queries use no variable but the dashboard's label variables and Grafana's $__rate_interval."""
    known = set(LABEL_VARIABLES) | set(GRAFANA_VARIABLES)
    for where, expr in queries(dashboard).items():
        assert used_variables(expr) <= known, f"{where}: unknown {sorted(used_variables(expr) - known)}"


def test_promtool_parses_every_query(dashboard: Dashboard, targets_file: Path) -> None:
    """Every panel query and every variable's selector, its variables given values of a rendered target, loads as a
    recording rule in `promtool check rules` (every lint check, fatal)."""
    values = sample_values(targets_file)
    rules = [
        {"record": f"dashboard:query_{number}", "expr": substitute_variables(expr, values)}
        for number, expr in enumerate(queries(dashboard).values())
    ]
    assert not [rule for rule in rules if "$" in rule["expr"]]
    rules_file = targets_file.parent / "dashboard-queries.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "sglang-fleet-dashboard", "rules": rules}]}))
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", rules_file.name, cwd=rules_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_every_series_a_query_selects_was_recorded(dashboard: Dashboard) -> None:
    """Each series name in the queries is in a recording of real SGLang 0.5.17 (sglang:*) or smg 1.13.0
    (smg_*), or is Prometheus' own `up`."""
    known = set(recorded_labels()) | PROMETHEUS_OWN_SERIES
    for where, expr in queries(dashboard).items():
        selected = queried_series(expr)
        assert selected, f"{where}: no series in {expr!r}"
        assert selected <= known, f"{where}: never recorded: {sorted(selected - known)}"


def test_every_label_a_query_names_is_one_its_series_carry(dashboard: Dashboard, targets_file: Path) -> None:
    """The jobs a query reads are jobs of the rendered targets, and every label it selects on, groups by or prints in
    its legend is one its series carry (a target label of those jobs or the exporter's own); a legend of an
    aggregation prints only labels the aggregation keeps."""
    by_job = target_labels(targets_file)
    legends = {where: target["legendFormat"] for where, target in panel_targets(dashboard)}
    for where, expr in queries(dashboard).items():
        jobs = queried_jobs(expr)
        assert jobs and jobs <= set(by_job), f"{where}: jobs {sorted(jobs)}, targets have {sorted(by_job)}"
        printed = set(LEGEND_LABEL.findall(legends.get(where, "")))
        named = {name for name, _ in selector_matchers(expr)} | grouping_labels(expr) | printed
        carried = carried_labels(expr, by_job)
        assert named <= carried, f"{where}: labels no series carries: {sorted(named - carried)}"
        kept = aggregated_by(expr)
        assert kept is None or printed <= kept, f"{where}: the legend prints {sorted(printed - kept)}, aggregated away"


def test_the_dashed_lines_are_the_alert_thresholds(tmp_path: Path) -> None:
    """The queue and accept-length panels draw the play's sglang_alert_max_queue and sglang_alert_min_accept_length,
    the values the alert rules use, and follow them when they are set (-e)."""
    defaults = play_vars()
    rendered = json.loads(render_dashboard(tmp_path).read_text())
    assert threshold_value(panel(rendered, QUEUE_PANEL), "red") == defaults["sglang_alert_max_queue"]
    assert threshold_value(panel(rendered, ACCEPT_LENGTH_PANEL), "green") == defaults["sglang_alert_min_accept_length"]
    changed = json.loads(render_dashboard(tmp_path, sglang_alert_max_queue=7, sglang_alert_min_accept_length=2.5).read_text())
    assert threshold_value(panel(changed, QUEUE_PANEL), "red") == 7
    assert threshold_value(panel(changed, ACCEPT_LENGTH_PANEL), "green") == 2.5


def test_the_accept_length_panel_shows_only_instances_that_draft(dashboard: Dashboard, targets_file: Path) -> None:
    """`promtool test rules` evaluates the accept-length query, All selected, over two instances scraped as recorded:
    one without speculative decoding (baseline: accept length 0, no draft tokens) and one with NEXTN; only the second
    is drawn, at its recorded accept length."""
    (query,) = panel(dashboard, ACCEPT_LENGTH_PANEL)["targets"]
    expr = substitute_variables(query["expr"], dict.fromkeys(LABEL_VARIABLES, ALL) | GRAFANA_VARIABLES)
    plain, drafting = [group for group in json.loads(targets_file.read_text()) if group["labels"]["job"] == "sglang"][:2]
    names = ("sglang:spec_accept_length", "sglang:spec_num_draft_tokens")
    series = scraped_series("baseline", plain, names) | scraped_series("nextn", drafting, names)
    drafting_labels, accept_length = recorded_sample("nextn", "sglang:spec_accept_length")
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": f"{value}x5"} for name, value in series.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                "labels": f"sglang:spec_accept_length{{{as_scraped(drafting_labels, drafting)}}}",
                                "value": float(accept_length),
                            }
                        ],
                    }
                ],
            }
        ],
    }
    test_file = targets_file.parent / "accept-length.test.yml"
    test_file.write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
