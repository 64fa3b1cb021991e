"""The rollout planner (module_utils/rollout_plan.py, filters sglang_rollout_*): waves bounded per served model by the
capacity budget, a canary first, and the budgets preflight refuses."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_rollout import (
    sglang_rollout_budget_problems,
    sglang_rollout_canary_peers,
    sglang_rollout_waves,
)
from ansible_collections.sglang.fleet.plugins.module_utils.rollout_plan import (
    budget_problems,
    budget_size,
    canary_peers,
    describe_waves,
    host_waves,
    leaving_instances,
    parse_budget,
    rollout_waves,
)


def instances(host_index: int, count: int, model: str = "qwen") -> list[dict[str, Any]]:
    return [{"name": f"sglang-{30000 + 10 * i}", "served_model_name": model, "host": host_index} for i in range(count)]


def fleet_of(hosts: int, per_host: int, model: str = "qwen") -> dict[str, list[dict[str, Any]]]:
    return {f"h{h:02d}": instances(h, per_host, model) for h in range(hosts)}


TWELVE = fleet_of(6, 2)  # 12 instances of one model on 6 hosts


def members(waves: list[list[dict[str, str]]]) -> list[tuple[str, str]]:
    return [(member["host"], member["name"]) for wave in waves for member in wave]


def test_budget_one_rolls_the_twelve_instances_one_at_a_time_host_by_host() -> None:
    waves = rollout_waves(TWELVE, TWELVE, 1)
    assert [len(wave) for wave in waves] == [1] * 12
    assert members(waves) == [(host, instance["name"]) for host, found in TWELVE.items() for instance in found]


def test_budget_of_25_percent_rolls_the_twelve_instances_three_at_a_time_across_hosts() -> None:
    waves = rollout_waves(TWELVE, TWELVE, "25%")
    assert [len(wave) for wave in waves] == [3, 3, 3, 3]
    assert waves[0] == [
        {"host": "h00", "name": "sglang-30000", "model": "qwen"},
        {"host": "h00", "name": "sglang-30010", "model": "qwen"},
        {"host": "h01", "name": "sglang-30000", "model": "qwen"},
    ]
    assert sorted(members(waves)) == sorted((host, i["name"]) for host, found in TWELVE.items() for i in found)


def test_the_percent_is_of_the_models_instances_in_the_run_not_of_those_that_change() -> None:
    changed = {"h00": TWELVE["h00"], "h01": TWELVE["h01"]}  # 4 of the 12 change
    assert [len(wave) for wave in rollout_waves(changed, TWELVE, "25%")] == [3, 1]


def test_models_roll_side_by_side_each_within_its_own_budget() -> None:
    fleet = {"a": instances(0, 4, "qwen"), "b": instances(1, 4, "coder")}
    waves = rollout_waves(fleet, fleet, "50%")
    assert [[(m["model"], m["host"]) for m in wave] for wave in waves] == [
        [("qwen", "a"), ("qwen", "a"), ("coder", "b"), ("coder", "b")],
        [("qwen", "a"), ("qwen", "a"), ("coder", "b"), ("coder", "b")],
    ]


def test_a_canary_rolls_the_first_instance_of_each_model_alone_first() -> None:
    fleet = {"a": instances(0, 3, "qwen"), "b": instances(1, 2, "coder")}
    waves = rollout_waves(fleet, fleet, 2, canary=True)
    assert [[(m["model"], m["host"], m["name"]) for m in wave] for wave in waves] == [
        [("qwen", "a", "sglang-30000"), ("coder", "b", "sglang-30000")],
        [("qwen", "a", "sglang-30010"), ("qwen", "a", "sglang-30020"), ("coder", "b", "sglang-30010")],
    ]


def test_each_host_gets_its_share_of_every_wave_and_the_waves_read_as_lines() -> None:
    waves = rollout_waves({"h00": TWELVE["h00"], "h01": TWELVE["h01"]}, TWELVE, "25%")
    assert host_waves(waves, "h01") == [["sglang-30000"], ["sglang-30010"]]
    assert host_waves(waves, "h09") == [[], []]
    assert describe_waves(waves) == [
        "wave 1/2: qwen: h00/sglang-30000, h00/sglang-30010, h01/sglang-30000",
        "wave 2/2: qwen: h01/sglang-30010",
    ]


def test_nothing_to_roll_is_no_wave() -> None:
    assert rollout_waves({"h00": []}, TWELVE, 1) == []


@pytest.mark.parametrize(
    ("budget", "total", "size"),
    [(1, 12, 1), ("2", 12, 2), ("25%", 12, 3), ("25%", 2, 1), ("10%", 7, 1), ("100%", 7, 7), (" 50 % ", 7, 3)],
)
def test_budget_sizes(budget: Any, total: int, size: int) -> None:
    assert budget_size(budget, total) == size


@pytest.mark.parametrize("budget", [0, "0%", "101%", "-1", "a quarter", True, "1.5"])
def test_an_unreadable_budget_is_refused(budget: Any) -> None:
    with pytest.raises(ValueError):
        parse_budget(budget)
    [problem] = budget_problems("h00", TWELVE["h00"], TWELVE, budget)
    assert problem.startswith("h00 host: sglang_rollout_max_unavailable=")


def test_a_budget_that_would_take_every_instance_of_a_model_down_is_refused_naming_host_instance_and_variable() -> None:
    fleet = {
        "a": [*instances(0, 2, "qwen"), {"name": "sglang-31000", "served_model_name": "coder"}],
        "b": instances(1, 2, "coder"),
    }
    assert budget_problems("a", fleet["a"], fleet, 1) == []
    [problem] = budget_problems("a", fleet["a"], fleet, 2)
    assert problem.startswith("a sglang-30000: sglang_rollout_max_unavailable=2: model qwen has 2 instance(s)")
    assert "nothing serving" in problem and "sglang_rollout_allow_outage: true" in problem
    # coder has 3 instances across the run: 2 leave one serving; all of them would leave none.
    assert [line.split(":")[0] for line in budget_problems("a", fleet["a"], fleet, "100%")] == [
        "a sglang-30000",
        "a sglang-31000",
    ]
    assert budget_problems("a", fleet["a"], fleet, "100%", allow_outage=True) == []
    # A model with one instance cannot roll without an outage, whatever the budget.
    [single] = budget_problems(
        "b", [{"name": "sglang-30000", "served_model_name": "solo"}], {"b": [{"served_model_name": "solo"}]}, 1
    )
    assert single.startswith("b sglang-30000: sglang_rollout_max_unavailable=1: model solo has 1 instance(s)")


def test_no_budget_is_no_problem() -> None:
    assert budget_problems("h00", TWELVE["h00"], TWELVE, None) == []
    assert budget_problems("h00", TWELVE["h00"], TWELVE, "") == []


def test_the_filters_read_each_hosts_facts() -> None:
    hostvars = {
        host: {"sglang_instances": found, "sglang_server_to_roll": found if host == "h02" else []}
        for host, found in TWELVE.items()
    }
    waves = sglang_rollout_waves(list(TWELVE), hostvars, "25%")
    assert [[(m["host"], m["name"]) for m in wave] for wave in waves] == [[("h02", "sglang-30000"), ("h02", "sglang-30010")]]
    assert sglang_rollout_budget_problems("h00", ["h00"], hostvars, 2)[0].startswith("h00 sglang-30000")
    assert sglang_rollout_budget_problems("h00", list(TWELVE), hostvars, 2) == []


def test_a_budget_or_canary_another_host_of_the_run_sets_otherwise_is_refused() -> None:
    # Each host plans the waves from its own settings: 1 here and 2 there would be different waves, out of step.
    def published(budget: str, canary: float = 0.0) -> dict[str, Any]:
        return {"sglang_rollout_max_unavailable": budget, "sglang_rollout_canary_seconds": canary}

    hostvars: dict[str, Any] = {host: {"sglang_instances": found, "rollout": published("1")} for host, found in TWELVE.items()}
    assert sglang_rollout_budget_problems("h00", list(TWELVE), hostvars, 1, settings="rollout") == []
    hostvars["h02"]["rollout"] = published("2")
    hostvars["h03"]["rollout"] = published("1", 30.0)
    del hostvars["h05"]["rollout"]  # no part in the check (it failed before it, or is not in the run)
    lines = sglang_rollout_budget_problems("h00", list(TWELVE), hostvars, 1, settings="rollout")
    assert lines == [
        "h00 host: sglang_rollout_max_unavailable=\"1\": host h02 of the run has '2': every host plans the rollout's"
        " waves from its own budget and canary, so they must be the same on every host of the run; fix: set"
        " sglang_rollout_max_unavailable, sglang_rollout_canary_seconds alike on every host of the run (the play's vars"
        " or group_vars/all)",
        "h00 host: sglang_rollout_canary_seconds=0.0: host h03 of the run has 30.0: every host plans the rollout's"
        " waves from its own budget and canary, so they must be the same on every host of the run; fix: set"
        " sglang_rollout_max_unavailable, sglang_rollout_canary_seconds alike on every host of the run (the play's vars"
        " or group_vars/all)",
    ]
    # Without the fact's name, nothing is compared (as before).
    assert sglang_rollout_budget_problems("h00", list(TWELVE), hostvars, 1) == []


def test_a_canary_is_compared_with_its_models_instances_of_later_waves_as_its_host_reaches_them() -> None:
    def served(host: str, port: int, model: str) -> dict[str, Any]:
        return {
            "name": f"sglang-{port}",
            "served_model_name": model,
            "url": f"http://127.0.0.1:{port}",
            "remote_url": f"http://{host}:{port}",
        }

    to_roll = {
        "a": [served("a", 30000, "qwen"), served("a", 30001, "qwen"), served("a", 31000, "coder")],
        "b": [served("b", 30000, "qwen")],
    }
    waves = rollout_waves(to_roll, to_roll, 1, canary=True)
    assert describe_waves(waves)[0] == "wave 1/3: qwen: a/sglang-30000; coder: a/sglang-31000"
    assert canary_peers(waves, to_roll, "a") == {"qwen": ["http://127.0.0.1:30001", "http://b:30000"]}
    hostvars = {host: {"sglang_server_to_roll": found} for host, found in to_roll.items()}
    assert sglang_rollout_canary_peers(waves, hostvars, "b") == {"qwen": ["http://a:30001", "http://127.0.0.1:30000"]}


def test_a_leaving_hosts_instances_are_read_from_its_instance_units_only() -> None:
    units = [
        "/etc/systemd/system/sglang-30001.service",
        "/etc/systemd/system/sglang-router.service",
        "/etc/systemd/system/sglang-gateway.service",
        "/etc/systemd/system/sglang-nvidia-devices.service",
        "/etc/systemd/system/sglang-30000.service",
    ]
    assert leaving_instances(units, "0.0.0.0", "10.0.0.5") == [
        {
            "name": "sglang-30000",
            "unit": "sglang-30000.service",
            "url": "http://127.0.0.1:30000",
            "remote_url": "http://10.0.0.5:30000",
        },
        {
            "name": "sglang-30001",
            "unit": "sglang-30001.service",
            "url": "http://127.0.0.1:30001",
            "remote_url": "http://10.0.0.5:30001",
        },
    ]
    assert leaving_instances(units, "127.0.0.1", "10.0.0.5")[0]["remote_url"] == ""


def test_a_canary_is_not_compared_with_another_hosts_instance_that_listens_on_loopback() -> None:
    """Such an instance has no remote_url; its url (127.0.0.1 of its own host) would name a port of the canary's host:
    another process (this host's instance of that port, or a local account's listener) would stand in for the peer."""
    to_roll = {
        "a": [{"name": "sglang-30000", "served_model_name": "qwen", "url": "http://127.0.0.1:30000", "remote_url": ""}],
        "b": [{"name": "sglang-30000", "served_model_name": "qwen", "url": "http://127.0.0.1:30000", "remote_url": ""}],
    }
    waves = rollout_waves(to_roll, to_roll, 1, canary=True)
    assert [[member["host"] for member in wave] for wave in waves] == [["a"], ["b"]]
    assert canary_peers(waves, to_roll, "a") == {}
