"""Instance groups: several models on one host, each group planned and checked as a host is, laid out one after the
other on the GPUs and ports, and the host checked as a whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Plan = Callable[..., dict[str, Any]]
CODER = "/srv/models/coder"
TWO_GROUPS: list[dict[str, Any]] = [
    {"name": "qwen", "instance_count": 5},
    {"name": "coder", "model_path": CODER, "speculative": {}, "server_args": {"mem-fraction-static": 0.85}},
]


@pytest.fixture
def groups_plan(plan: Plan, model_facts: dict[str, Any]) -> Plan:
    """plan() with the coder group's directory read by the probe (here: the stand-in's facts at another path)."""

    def run(host: str = "b200", facts: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
        group_models = {CODER: {**model_facts, "path": CODER}}
        return plan(host, {"group_models": group_models, **(facts or {})}, **overrides)

    return run


def test_two_groups_share_the_gpus_and_ports_in_order_each_with_its_model_and_settings(groups_plan: Plan) -> None:
    result = groups_plan(sglang_instance_groups=TWO_GROUPS)
    assert result["problems"] == []
    instances = result["instances"]
    assert [(i["name"], i["group"], i["gpu_ids"], i["nccl_port"]) for i in instances] == [
        (f"sglang-{30000 + n}", "qwen" if n < 5 else "coder", [n], 31000 + n) for n in range(7)
    ]
    qwen, coder = instances[0], instances[6]
    assert qwen["served_model_name"] == "Qwen3.6-27B" and coder["served_model_name"] == "coder"
    assert coder["model_path"] == CODER and coder["argv"][coder["argv"].index("--model-path") + 1] == CODER
    assert "--speculative-algorithm" in qwen["argv"] and "--speculative-algorithm" not in coder["argv"]
    # The group's server args replace the host's: no hierarchical cache for the coder group.
    assert "--enable-hierarchical-cache" in qwen["argv"] and "--enable-hierarchical-cache" not in coder["argv"]
    assert coder["argv"][coder["argv"].index("--mem-fraction-static") + 1] == "0.85"


def test_a_group_without_a_count_takes_the_gpus_left_and_one_with_too_many_is_named(groups_plan: Plan) -> None:
    rest = groups_plan(sglang_instance_groups=[{"name": "qwen", "instance_count": 3}, {"name": "coder", "model_path": CODER}])
    assert [i["group"] for i in rest["instances"]] == ["qwen"] * 3 + ["coder"] * 4
    crowded = groups_plan(sglang_instance_groups=[{"name": "qwen", "instance_count": 6}, {"name": "coder", "instance_count": 2}])
    assert crowded["problems"] == [
        "b200 group coder: sglang_instance_groups.coder.instance_count=2: 1 GPU(s) [6] hold 1 instance(s) of 1 GPU(s); "
        "fix: use fewer or smaller instances, or list more GPUs in sglang_gpu_ids"
    ]


def test_a_groups_model_is_checked_as_the_hosts_is(groups_plan: Plan) -> None:
    missing = groups_plan(facts={"group_models": {CODER: {"exists": False, "path": CODER}}}, sglang_instance_groups=TWO_GROUPS)
    assert missing["problems"] == [
        f'b200 group coder: sglang_instance_groups.coder.model_path="{CODER}": no such directory on the host; '
        "fix: copy the model there or fix the path"
    ]


def test_the_host_cache_is_summed_over_every_group(groups_plan: Plan) -> None:
    groups = [TWO_GROUPS[0], {**TWO_GROUPS[1], "server_args": {"enable-hierarchical-cache": True, "hicache-size": 200}}]
    [line] = groups_plan(sglang_instance_groups=groups)["problems"]
    assert line.startswith('b200 host: sglang_instance_groups.coder.server_args.hicache-size={"sglang-30005": 200, ')
    assert "host cache 800 GB over all ranks exceeds host RAM 738 GiB" in line


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (
            [{"name": "qwen"}, {"name": "qwen"}],
            'b200 host: sglang_instance_groups[1].name="qwen": each group needs a name of its own',
        ),
        (
            [{"name": "qwen", "model": {"repo": "Qwen/Qwen3-Coder"}}],
            'b200 group qwen: sglang_instance_groups.qwen=["model"]: unknown keys (a group serves a model directory, '
            "model_path, or the host's sglang_model)",
        ),
        ({"name": "qwen"}, 'b200 host: sglang_instance_groups={"name": "qwen"}: must be a list of groups'),
    ],
)
def test_malformed_groups_are_refused_naming_the_group(groups_plan: Plan, groups: Any, expected: str) -> None:
    result = groups_plan(sglang_instance_groups=groups)
    assert result["instances"] == [] and len(result["problems"]) == 1
    assert result["problems"][0].startswith(expected), result["problems"]


def test_a_problem_of_the_hosts_own_setting_in_a_group_names_the_group_and_the_hosts_variable(groups_plan: Plan) -> None:
    """The host's own value is named as the host's variable, in each group that inherits it; a group's own value as
    the group's."""
    hosts = groups_plan(sglang_instance_groups=TWO_GROUPS, sglang_tensor_parallel_size=0)["problems"]
    assert [line.split(": must")[0] for line in hosts] == [
        "b200 group qwen: sglang_tensor_parallel_size=0",
        "b200 group coder: sglang_tensor_parallel_size=0",
    ]
    own = groups_plan(sglang_instance_groups=[TWO_GROUPS[0], {**TWO_GROUPS[1], "tensor_parallel_size": 0}])["problems"]
    assert [line.split(": must")[0] for line in own] == ["b200 group coder: sglang_instance_groups.coder.tensor_parallel_size=0"]
