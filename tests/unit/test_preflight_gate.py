"""The fleet-wide gate collects every role's preflight problems by the fact's name, not from a list to keep in step."""

from __future__ import annotations

from ansible_collections.sglang.fleet.plugins.filter.preflight import problem_facts, sglang_preflight_report


def test_every_role_problem_fact_is_found_by_name_with_the_plan_first() -> None:
    names = [
        "sglang_venv_preflight_problems",
        "ansible_host",
        "cuda_preflight_problems",
        "sglang_preflight_problems",
        "preflight_problems",
        "sglang_server_preflight_problems_count",
        "new_role_preflight_problems",
    ]
    assert problem_facts(names) == [
        "sglang_preflight_problems",
        "cuda_preflight_problems",
        "new_role_preflight_problems",
        "sglang_venv_preflight_problems",
    ]


def test_the_report_lists_each_host_problems_in_host_order_and_skips_empty_or_unset_facts() -> None:
    hostvars = {
        "b200": {"sglang_preflight_problems": ["b200 plan"], "cuda_preflight_problems": None, "x": 1},
        "ct129": {"some_new_role_preflight_problems": ["ct129 new role"], "sglang_preflight_problems": []},
        "idle": {},
    }
    assert sglang_preflight_report(["ct129", "idle", "b200"], hostvars) == ["ct129 new role", "b200 plan"]
