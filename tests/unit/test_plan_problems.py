"""Preflight problems found by the plan filter: one line each, naming host, instance, variable, value and fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

Plan = Callable[..., dict[str, Any]]

CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    ("tp-too-big", "ct129", {"sglang_tensor_parallel_size": 4}, {}, "2 GPU(s) [0, 1] hold 0 instance(s) of 4 GPU(s)"),
    ("gpus-per-instance", "b200", {"sglang_gpus_per_instance": 2}, {}, "tensor x data x pipeline parallel = 1 x 1 x 1 = 1"),
    ("missing-gpu", "b200", {"sglang_gpu_ids": [0, 9]}, {}, "GPU 9 does not exist"),
    ("duplicate-gpu", "b200", {"sglang_gpu_ids": [0, 0, 1]}, {}, "listed twice"),
    ("port-overlap", "b200", {"sglang_nccl_port_base": 30003}, {}, "port 30003 is also sglang-30000's sglang_nccl_port_base"),
    ("renamed-flag", "b200", {"sglang_server_args": {"cuda-graph-max-bs": 512}}, {}, "use --cuda-graph-max-bs-decode"),
    ("managed-flag", "b200", {"sglang_server_args": {"tp-size": 2}}, {}, "use sglang_tensor_parallel_size"),
    (
        "not-a-number",
        "b200",
        {"sglang_server_args": {"max-running-requests": "many"}},
        {},
        "--max-running-requests takes a number (int)",
    ),
    ("bad-choice", "ct129", {"sglang_server_args": {"dtype": "bf16"}}, {}, "--dtype accepts auto, half, float16, bfloat16"),
    ("removed-env", "b200", {"sglang_environment": {"SGLANG_ENABLE_SPEC_V2": "1"}}, {}, "no longer reads it"),
    ("loader-env", "b200", {"sglang_environment": {"LD_PRELOAD": "/var/lib/sglang/x.so"}}, {}, "LD_* and PYTHON* variables"),
    ("python-env", "b200", {"sglang_environment": {"PYTHONPATH": "/var/lib/sglang"}}, {}, "LD_* and PYTHON* variables"),
    ("env-name", "b200", {"sglang_environment": {"A=B": "1"}}, {}, 'sglang_environment.A=B="1": not a valid environment'),
    (
        "draft-without-steps",
        "ct129",
        {"sglang_speculative": {"algorithm": "NEXTN", "num_draft_tokens": 1}},
        {},
        "without num_steps",
    ),
    (
        "draft-mismatch",
        "b200",
        {"sglang_speculative": {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 8}},
        {},
        "set num_draft_tokens: 4",
    ),
    ("too-little-memory", "ct129", {"sglang_server_args": {"mem-fraction-static": 0.5}}, {}, "short by"),
    (
        "host-cache",
        "b200",
        {"sglang_server_args": {"enable-hierarchical-cache": True, "hicache-size": 200}},
        {},
        "sglang_server_args.hicache-size=200: host cache 1400 GB over all ranks exceeds host RAM",
    ),
    (
        "host-cache-override",
        "b200",
        {"sglang_instance_overrides": {2: {"server_args": {"hicache-size": 700}}}},
        {},
        'sglang_instance_overrides[].server_args.hicache-size={"sglang-30002": 700}: host cache 1180 GB',
    ),
    (
        "foreign-gpu-process",
        "b200",
        {},
        {"gpu_processes": [{"pid": 77, "gpu_index": 6, "used_mib": 900, "name": "python3", "unit": None}]},
        "GPU 6 holds 900 MiB of PID 77",
    ),
    (
        "port-taken",
        "b200",
        {},
        {"listening": [{"port": 30002, "pid": 88, "name": "nginx", "unit": "nginx.service"}]},
        "port 30002 is taken by PID 88 (nginx)",
    ),
    (
        "no-nvidia-smi",
        "b200",
        {},
        {"gpu_error": "[Errno 2] No such file or directory: 'nvidia-smi'", "gpus": []},
        "GPUs could not be listed",
    ),
]


@pytest.mark.parametrize(
    ("host", "variables", "facts", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_problem_is_reported_with_host_and_fix(
    plan: Plan, host: str, variables: dict[str, Any], facts: dict[str, Any], expected: str
) -> None:
    problems = plan(host, facts, **variables)["problems"]
    assert any(expected in problem for problem in problems), problems
    assert all(problem.startswith(f"{host} ") and "; fix: " in problem for problem in problems)


def test_production_settings_have_no_problems(plan: Plan) -> None:
    assert plan("ct129")["problems"] == []
    assert plan("b200")["problems"] == []


def test_memory_message_says_what_would_fit(plan: Plan) -> None:
    (problem,) = [p for p in plan("ct129", sglang_server_args={"mem-fraction-static": 0.5})["problems"] if "short by" in p]
    assert "mem-fraction-static >= 0.6" in problem and "tensor parallel >= 3" in problem


def test_own_instances_do_not_count_as_foreign(plan: Plan) -> None:
    own = {
        "gpu_processes": [{"pid": 5, "gpu_index": 0, "used_mib": 9, "name": "python3", "unit": "sglang-30000.service"}],
        "listening": [{"port": 30000, "pid": 5, "name": "python3", "unit": "sglang-30000.service"}],
    }
    assert plan("b200", own)["problems"] == []


def test_every_host_problem_is_kept_not_only_the_first(plan: Plan) -> None:
    problems = plan("b200", sglang_server_args={"cuda-graph-max-bs": 512, "mamba-scheduler-strategy": "extra_buffer"})["problems"]
    assert len([p for p in problems if "does not exist in SGLang 0.5.23" in p]) == 2


def test_command_lines_the_runtime_parser_refused_are_problems(plan: Plan) -> None:
    from sglang_plan import sglang_parse_problems

    instances = plan("b200")["instances"][:3]
    verdicts = {
        "sglang-30000": {"rc": 0, "error": ""},
        "sglang-30001": {
            "rc": 2,
            "error": "usage: launch_server.py [-h]\nlaunch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n",
        },
        "sglang-30002": {"rc": 1, "error": "AssertionError: speculative_num_steps must be set with speculative_eagle_topk"},
    }
    checked = {"rc": 0, "stdout": json.dumps(verdicts)}
    problems = sglang_parse_problems(instances, checked, "b200")
    assert len(problems) == 2
    assert problems[0].startswith("b200 instance sglang-30001: command line")
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in problems[0]
    assert problems[1].startswith("b200 instance sglang-30002: command line")
    assert "AssertionError: speculative_num_steps must be set" in problems[1]
    assert sglang_parse_problems(instances, {"rc": 1, "stdout": ""}, "b200") == [], "a checker that could not run is no verdict"
    assert sglang_parse_problems(instances, {"skipped": True}, "b200") == []
