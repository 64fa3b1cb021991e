"""The fleet's rollout plan: which changed instances restart together (waves), bounded per served model by the
capacity budget (sglang_rollout_max_unavailable), and the budgets preflight refuses (a model left with nothing
serving). Pure data in, data out: the roll tasks run one wave after another across hosts."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_url, remote_url
from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

INSTANCE_UNIT = re.compile(r"^sglang-(\d+)\.service$")
BUDGET = re.compile(r"^\s*(\d+)\s*(%?)\s*$")
VARIABLE = "sglang_rollout_max_unavailable"


def parse_budget(budget: Any) -> tuple[int, bool]:
    """(number, is_percent) of a budget written as a count (2, "2") or a percent ("25%"); ValueError otherwise."""
    if isinstance(budget, bool):
        raise ValueError(f"{budget!r} is not a count or a percent")
    match = BUDGET.match(str(budget))
    if not match:
        raise ValueError(f"{budget!r} is not a count (1) or a percent (25%)")
    number, percent = int(match.group(1)), bool(match.group(2))
    if number < 1 or (percent and number > 100):
        raise ValueError(f"{budget!r} is not a count of at least 1 or a percent from 1% to 100%")
    return number, percent


def budget_size(budget: Any, total: int) -> int:
    """Instances of a model with `total` instances that may be down at once: a count as given, a percent of the total
    rounded down; at least 1 (a rollout always moves)."""
    number, percent = parse_budget(budget)
    return max(1, math.floor(total * number / 100) if percent else number)


def model_of(instance: Mapping[str, Any]) -> str:
    """The model an instance serves, as clients and gateways name it."""
    return str(instance.get("served_model_name") or instance.get("name") or "")


def model_totals(fleet: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """Instances of each served model across the run (`fleet`: host -> its planned instances)."""
    totals: dict[str, int] = {}
    for instances in fleet.values():
        for instance in instances:
            totals[model_of(instance)] = totals.get(model_of(instance), 0) + 1
    return totals


def rollout_waves(
    to_roll: Mapping[str, Sequence[Mapping[str, Any]]],
    fleet: Mapping[str, Sequence[Mapping[str, Any]]],
    budget: Any,
    canary: bool = False,
) -> list[list[dict[str, str]]]:
    """The waves of a rollout: each a list of {host, name, model}, every instance of `to_roll` (host -> its instances to
    restart, hosts in run order) in exactly one wave.

    Each model rolls on its own: its instances (host by host, in plan order) in chunks of its budget (sized against
    its instances across the run, `fleet`); with `canary`, its first instance alone first. Wave k holds chunk k of
    every model, so models with different budgets roll side by side and no wave takes more of a model down than its
    budget allows.
    """
    totals = model_totals(fleet)
    chunks: dict[str, list[list[dict[str, str]]]] = {}
    pending: dict[str, list[dict[str, str]]] = {}
    for host, instances in to_roll.items():
        for instance in instances:
            model = model_of(instance)
            pending.setdefault(model, []).append({"host": host, "name": str(instance["name"]), "model": model})
    for model, members in pending.items():
        size = budget_size(budget, max(totals.get(model, 0), len(members)))
        first = [members[:1]] if canary and len(members) > 1 else []
        rest = members[len(first) :]
        chunks[model] = first + [rest[start : start + size] for start in range(0, len(rest), size)]
    depth = max((len(model_chunks) for model_chunks in chunks.values()), default=0)
    return [
        [member for model in chunks for member in (chunks[model][wave] if wave < len(chunks[model]) else [])]
        for wave in range(depth)
    ]


def host_waves(waves: Sequence[Sequence[Mapping[str, str]]], host: str) -> list[list[str]]:
    """The names of `host`'s instances in each wave (an empty list where it has none): what its roll tasks restart."""
    return [[member["name"] for member in wave if member["host"] == host] for wave in waves]


def describe_waves(waves: Sequence[Sequence[Mapping[str, str]]]) -> list[str]:
    """One line per wave, for --check and the run's log: `wave 1/3: model-a: h1/sglang-30000, h2/sglang-30000`."""
    lines = []
    for number, wave in enumerate(waves, start=1):
        models: dict[str, list[str]] = {}
        for member in wave:
            models.setdefault(member["model"], []).append(f"{member['host']}/{member['name']}")
        parts = "; ".join(f"{model}: {', '.join(names)}" for model, names in models.items())
        lines.append(f"wave {number}/{len(waves)}: {parts}")
    return lines


def budget_problems(
    host: str,
    instances: Sequence[Mapping[str, Any]],
    fleet: Mapping[str, Sequence[Mapping[str, Any]]],
    budget: Any,
    allow_outage: bool = False,
) -> list[str]:
    """Preflight's refusals for `host`: an unreadable budget, or one that lets every instance of a model this host
    serves be down at once (counted across the run, `fleet`) unless `allow_outage`. Each names the host's first
    instance of that model and the variable."""
    if budget is None or budget == "":
        return []
    try:
        parse_budget(budget)
    except ValueError as error:
        return [problem_line(host, "host", VARIABLE, budget, str(error), "set a count such as 1 or a percent such as 25%")]
    if allow_outage:
        return []
    totals = model_totals(fleet)
    problems = []
    seen: set[str] = set()
    for instance in instances:
        model = model_of(instance)
        if model in seen:
            continue
        seen.add(model)
        total = totals.get(model, 0)
        if budget_size(budget, total) >= total:
            problems.append(
                problem_line(
                    host,
                    str(instance["name"]),
                    VARIABLE,
                    budget,
                    f"model {model} has {total} instance(s) in this run and the budget lets all of them be down at once:"
                    " a rollout would leave it with nothing serving",
                    "lower the budget below the model's instance count, add instances of the model, or set "
                    "sglang_rollout_allow_outage: true to accept the outage",
                )
            )
    return problems


def canary_peers(
    waves: Sequence[Sequence[Mapping[str, str]]], to_roll: Mapping[str, Sequence[Mapping[str, Any]]], host: str
) -> dict[str, list[str]]:
    """For each model, the URLs of its instances in the waves after the canaries' (they still run the previous
    configuration), as `host` reaches them: an instance's `url` on `host`, its `remote_url` on another host (none for
    one that listens on its host's loopback: its `url` would name a port of `host`, another process)."""
    found = {(name, str(instance["name"])): instance for name, instances in to_roll.items() for instance in instances}
    peers: dict[str, list[str]] = {}
    for wave in waves[1:]:
        for member in wave:
            instance = found.get((member["host"], member["name"])) or {}
            url = instance.get("url") if member["host"] == host else instance.get("remote_url")
            if url:
                peers.setdefault(member["model"], []).append(str(url))
    return peers


def leaving_instances(
    unit_paths: Sequence[str], listen_host: str, advertise_host: str, tls: bool = False
) -> list[dict[str, str]]:
    """The instances a host leaving the fleet runs, from its instance units (sglang-<port>.service; the router's,
    the gateway's and the device-node unit are not instances), each as sglang_rollout takes it: name, unit, the URL
    its host's router knows it by (url) and the one other hosts' gateways do (remote_url); https where the instances
    serve TLS (`tls`: sglang_server_tls_cert)."""
    found = []
    for path in unit_paths:
        match = INSTANCE_UNIT.match(str(path).rsplit("/", 1)[-1])
        if match:
            port = int(match.group(1))
            found.append(
                {
                    "name": f"sglang-{port}",
                    "unit": match.group(0),
                    "url": connect_url(listen_host, port, tls),
                    "remote_url": remote_url(listen_host, advertise_host, port, tls),
                }
            )
    return sorted(found, key=lambda instance: instance["name"])


def alike_problems(host: str, settings: Mapping[str, Any], published: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every host plans the same waves from its own budget and canary: `settings`, this host's ({variable: value}), and
    `published`, each other host's as it published them, must agree. One line per host that differs."""
    lines = []
    for other, theirs in published.items():
        differs = {name: theirs.get(name) for name, value in settings.items() if theirs.get(name) != value}
        if other == host or not differs:
            continue
        name = next(iter(differs))
        lines.append(
            problem_line(
                host,
                "host",
                name,
                settings[name],
                f"host {other} of the run has {differs[name]!r}: every host plans the rollout's waves from its own"
                " budget and canary, so they must be the same on every host of the run",
                f"set {', '.join(settings)} alike on every host of the run (the play's vars or group_vars/all)",
            )
        )
    return lines
