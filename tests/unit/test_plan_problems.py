"""Preflight problems found by the plan filter: one line each, naming host, instance, variable, value and fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
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
    # Item 2: secrets and the aliases of managed flags (argparse dest), and a second --config.
    ("secret-api-key", "b200", {"sglang_server_args": {"api-key": "sk-x"}}, {}, "keep it in ansible-vault as sglang_api_key"),
    ("secret-admin-key", "b200", {"sglang_server_args": {"admin-api-key": "sk-x"}}, {}, "--admin-api-key is a secret"),
    (
        "secret-ssl-password",
        "b200",
        {"sglang_server_args": {"ssl-keyfile-password": "pw"}},
        {},
        'sglang_server_args.ssl-keyfile-password="<hidden>": --ssl-keyfile-password is a secret',
    ),
    (
        "alias-model",
        "b200",
        {"sglang_server_args": {"model": "/srv/other"}},
        {},
        "--model (an alias of --model-path) is set by sglang-fleet; fix: use sglang_model_path",
    ),
    (
        "alias-tensor-parallel",
        "b200",
        {"sglang_server_args": {"tensor-parallel-size": 2}},
        {},
        "--tensor-parallel-size (an alias of --tp-size) is set by sglang-fleet; fix: use sglang_tensor_parallel_size",
    ),
    ("alias-data-parallel", "b200", {"sglang_server_args": {"data-parallel-size": 2}}, {}, "use sglang_data_parallel_size"),
    (
        "alias-pipeline-parallel",
        "b200",
        {"sglang_server_args": {"pipeline_parallel_size": 2}},
        {},
        "use sglang_pipeline_parallel_size",
    ),
    (
        "override-alias",
        "b200",
        {"sglang_instance_overrides": {1: {"server_args": {"tensor-parallel-size": 2}}}},
        {},
        "b200 instance sglang-30001: sglang_instance_overrides.1.server_args.tensor-parallel-size=2: --tensor-parallel-size",
    ),
    ("second-config", "b200", {"sglang_server_args": {"config": "/etc/x.yaml"}}, {}, "--config is set by sglang-fleet"),
    # Item 16: control characters in anything that reaches a rendered file.
    ("control-model-path", "b200", {"sglang_model_path": "/srv/m\nExecStartPre=/bin/sh"}, {}, "sglang_model_path="),
    ("control-served-name", "b200", {"sglang_served_model_name": "q\tq"}, {}, "control character U+0009"),
    ("control-listen-host", "b200", {"sglang_listen_host": "127.0.0.1\r"}, {}, 'sglang_listen_host="127.0.0.1\\r": contains'),
    (
        "control-arg-value",
        "b200",
        {"sglang_server_args": {"tool-call-parser": "qwen\n"}},
        {},
        'tool-call-parser="qwen\\n": contains',
    ),
    ("control-arg-key", "b200", {"sglang_server_args": {"dtype\n": "auto"}}, {}, "control character U+000A"),
    ("control-speculative", "b200", {"sglang_speculative": {"algorithm": "EAGLE\x7f"}}, {}, "U+007F"),
    ("control-env-value", "b200", {"sglang_environment": {"NCCL_DEBUG": "WARN\nX=1"}}, {}, "sglang_environment.NCCL_DEBUG="),
    ("control-env-name", "b200", {"sglang_environment": {"A\x1bB": "1"}}, {}, "U+001B"),
    (
        "control-override",
        "b200",
        {"sglang_instance_overrides": {0: {"environment": {"X": "a\nb"}}}},
        {},
        "sglang_instance_overrides.0=",
    ),
    # Item 17: what SGLang refuses at start, and what no careful operator wants.
    (
        "context-too-long",
        "b200",
        {"sglang_server_args": {"context-length": 300000}},
        {},
        "sglang_server_args.context-length=300000: above the model's context length 262144",
    ),
    (
        "heads-not-divisible",
        "b200",
        {"sglang_tensor_parallel_size": 7, "sglang_gpus_per_instance": 7},
        {},
        "the model's 24 attention heads cannot be split over 7",
    ),
    ("mem-fraction-one", "b200", {"sglang_server_args": {"mem-fraction-static": 1.0}}, {}, "must be between 0 and 1"),
    ("mem-fraction-zero", "b200", {"sglang_server_args": {"mem-fraction-static": 0}}, {}, "must be between 0 and 1"),
    (
        "max-running-zero",
        "b200",
        {"sglang_server_args": {"max-running-requests": 0}},
        {},
        "max-running-requests=0: must be at least 1",
    ),
    (
        "override-names-no-instance",
        "b200",
        {"sglang_instance_overrides": {9: {"server_args": {"hicache-size": 10}}}},
        {},
        "b200 host: sglang_instance_overrides.9=",
    ),
    (
        "unknown-variable",
        "b200",
        {"hostvars": {"b200": {"sglang_tensor_paralel_size": 2, "sglang_port_base": 30000}}},
        {},
        "b200 host: sglang_tensor_paralel_size: no role of sglang-fleet reads this variable, so it changes nothing "
        "(did you mean sglang_tensor_parallel_size?)",
    ),
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
    (
        "snake-case-key",
        "b200",
        {"sglang_instance_overrides": {1: {"server_args": {"max_running_requests": 48}}}},
        {},
        "b200 instance sglang-30001: sglang_instance_overrides.1.server_args.max_running_requests=48: keys are SGLang's"
        " flags without -- and with - between words, as `--help` lists them (--max-running-requests); fix: write"
        " max-running-requests",
    ),
    (
        "dashed-key",
        "b200",
        {"sglang_server_args": {"--max-running-requests": 48}},
        {},
        "b200 host: sglang_server_args.--max-running-requests=48: keys are SGLang's flags without --",
    ),
    (
        "ngram-top-k",
        "b200",
        {"sglang_speculative": {"algorithm": "NGRAM", "eagle_topk": 4}},
        {},
        "b200 instance sglang-30000: sglang_speculative.eagle_topk=4: SGLang 0.5.23 sets NGRAM's eagle_topk to"
        " --speculative-ngram-max-bfs-breadth",
    ),
    (
        "dspark-steps",
        "b200",
        {"sglang_speculative": {"algorithm": "DSPARK", "num_steps": 3}},
        {},
        "sglang_speculative.num_steps=3: SGLang 0.5.23 sets DSPARK's num_steps to 1 and ignores this value",
    ),
    (
        "dflash-without-draft",
        "b200",
        {"sglang_speculative": {"algorithm": "DFLASH"}},
        {},
        "b200 instance sglang-30000: sglang_speculative.draft_model_path=null: DFLASH needs a draft model",
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


def running_one_per_gpu(count: int) -> dict[str, Any]:
    """b200's facts while its production shape runs: sglang-3000<i> holds GPU i."""
    return {
        "gpu_processes": [
            {"pid": 100 + i, "gpu_index": i, "used_mib": 9, "name": "python3", "unit": f"sglang-{30000 + i}.service"}
            for i in range(count)
        ]
    }


def test_a_reshape_is_no_problem_and_names_what_stops_first(plan: Plan) -> None:
    result = plan("b200", running_one_per_gpu(7), sglang_gpus_per_instance=2, sglang_tensor_parallel_size=2)
    assert result["problems"] == []
    reshape = result["reshape"]
    # sglang-30001 holds GPU 1, now sglang-30000's; sglang-30002 holds GPU 2, now sglang-30001's. sglang-30000 keeps GPU 0.
    assert reshape["displaced"] == ["sglang-30001.service", "sglang-30002.service"]
    assert reshape["removed"] == [f"sglang-{port}.service" for port in range(30003, 30007)]
    assert "reshape from 7 running instance(s) to 3" in reshape["summary"]
    assert "Serving while they are down: 1 of 7 (sglang-30000.service" in reshape["summary"]


def test_the_same_shape_is_no_reshape(plan: Plan) -> None:
    assert plan("b200", running_one_per_gpu(7))["reshape"] == {"displaced": [], "removed": [], "summary": ""}


def test_every_host_problem_is_kept_not_only_the_first(plan: Plan) -> None:
    problems = plan("b200", sglang_server_args={"cuda-graph-max-bs": 512, "mamba-scheduler-strategy": "extra_buffer"})["problems"]
    assert len([p for p in problems if "was removed after SGLang 0.5.19 (gone in 0.5.20" in p]) == 2


def test_command_lines_the_runtime_parser_refused_are_problems(plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import parse_problems

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
    problems = parse_problems(instances, checked, "b200")
    assert len(problems) == 2
    assert problems[0].startswith("b200 instance sglang-30001: command line")
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in problems[0]
    assert problems[1].startswith("b200 instance sglang-30002: command line")
    assert "AssertionError: speculative_num_steps must be set" in problems[1]
    assert parse_problems(instances, {"skipped": True}, "b200") == []
    # What the model's code or a library printed before the verdict is not read as the verdict.
    noisy = {"rc": 0, "stdout": "Loading remote code...\n" + json.dumps(verdicts)}
    assert parse_problems(instances, noisy, "b200") == problems


def test_a_parser_check_that_could_not_run_is_a_problem_unless_the_deploy_repairs_the_runtime(plan: Plan) -> None:
    """Servers are never restarted with command lines nobody parsed: a check that did not start, crashed or printed no
    verdict names the host and why; only where this deploy installs the runtime again (and parses after) it is none."""
    from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import parse_problems

    instances = plan("b200")["instances"]
    for checked in (
        {"rc": 1, "stdout": "", "stderr": "Failed to start transient service unit: Unit parse-check.service exists"},
        {"rc": -1, "stdout": "", "stderr": ""},
        {"rc": 0, "stdout": "not a verdict", "stderr": ""},
    ):
        problems = parse_problems(instances, checked, "b200")
        assert len(problems) == 1 and problems[0].startswith("b200 host: sglang_version"), problems
        assert "the runtime's parser check could not run" in problems[0]
        assert parse_problems(instances, checked, "b200", repairs_runtime=True) == []
    assert (
        "Unit parse-check.service exists"
        in parse_problems(
            instances,
            {"rc": 1, "stdout": "", "stderr": "x\nFailed to start transient service unit: Unit parse-check.service exists"},
            "b200",
        )[0]
    )


def test_a_secret_is_never_shown_in_the_problem(plan: Plan) -> None:
    problems = plan("b200", sglang_server_args={"api-key": "sk-very-secret", "ssl-keyfile-password": "hunter2"})["problems"]
    assert len(problems) == 2
    assert not any("sk-very-secret" in p or "hunter2" in p for p in problems)


@pytest.mark.parametrize(
    "server_args",
    [
        {"api-keys": "sk-MISSPELLED-1"},
        {"ssl-keyfile-passwd": "sk-MISSPELLED-1"},
        {"admin-api-keys": "sk-MISSPELLED-1"},
        {"api_kay": "sk-MISSPELLED-1"},
        {"ssl-keyfile-pasword": ["sk-MISSPELLED-1"]},
        {"api-keys": "sk-MISSPELLED-1\n"},  # with a control character as well
    ],
    ids=["api-keys", "ssl-keyfile-passwd", "admin-api-keys", "api_kay", "ssl-keyfile-pasword", "control"],
)
def test_a_misspelled_secret_flag_s_value_is_in_no_output(plan: Plan, server_args: dict[str, Any]) -> None:
    """Issue 38, finding 6: an unknown flag's problem printed its value; for a flag whose name, or its nearest known
    flag, is a secret, the value is never shown (the problem still names the flag and suggests the right one)."""
    for variables in ({"sglang_server_args": server_args}, {"sglang_instance_overrides": {1: {"server_args": server_args}}}):
        result = plan("b200", **variables)
        assert result["problems"], "the misspelling is still a problem"
        assert "sk-MISSPELLED-1" not in json.dumps(result), result["problems"]
        assert any("<hidden>" in problem for problem in result["problems"])


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP"])
def test_a_loader_variable_in_the_runtime_environment_is_refused(plan: Plan, name: str) -> None:
    """Issue 38, finding 4: sglang_venv_runtime_environment reaches every server and the parser check (root before);
    it goes through the servers' environment check."""
    problems = plan("b200", sglang_venv_runtime_environment={name: "/tmp/evil.so", "SGLANG_SIM_SEED": "1"})["problems"]
    assert [p for p in problems if "sglang_venv_runtime_environment" in p] == [
        f'b200 host: sglang_venv_runtime_environment.{name}="/tmp/evil.so": LD_* and PYTHON* variables change what code '
        f"the server (and its root start-up check) loads; fix: remove {name}; install libraries into the venv or the "
        "system instead"
    ]


def test_an_ordinary_misspelled_flag_still_shows_its_value(plan: Plan) -> None:
    (problem,) = plan("b200", sglang_server_args={"tool-call-parserr": "qwen25"})["problems"]
    assert '"qwen25"' in problem and "did you mean --tool-call-parser?" in problem


@pytest.mark.parametrize(
    "key", ["model", "model-path", "tensor-parallel-size", "data-parallel-size", "pipeline-parallel-size", "config", "--port"]
)
def test_a_managed_setting_under_any_spelling_renders_no_second_flag(plan: Plan, key: str) -> None:
    result = plan("b200", sglang_server_args={key: 2})
    assert len(result["problems"]) == 1 and "is set by sglang-fleet" in result["problems"][0]
    for instance in result["instances"]:
        assert "--" + key.removeprefix("--") not in instance["argv"] or key in ("model-path", "--port")


def test_the_checked_argv_is_the_units_argv_with_the_key_file(plan: Plan) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines

    instances = plan("b200", sglang_api_key="sk-x")["instances"]
    assert all(i["argv"][-2:] == ["--config", f"/etc/sglang-fleet/secrets/{i['name']}.yaml"] for i in instances)
    assert sum(word == "--config" for word in instances[0]["argv"]) == 1
    checked = checked_command_lines(instances)
    assert checked["sglang-30000"] == {
        "argv": instances[0]["argv"],
        "stand_in_config": instances[0]["config_file"],
        "stand_in_files": [],
    }
    assert plan("b200")["instances"][0]["config_file"] is None and "--config" not in plan("b200")["instances"][0]["argv"]


def _checker(monkeypatch: pytest.MonkeyPatch) -> Any:
    """roles/sglang_venv/files/check_server_args.py, with the simulator importable as the venv has it."""
    import importlib.util

    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "simulator/src"))
    monkeypatch.setenv("SGLANG_SIM_VERSION", "0.5.23")
    spec = importlib.util.spec_from_file_location("check_server_args", ROOT / "roles/sglang_venv/files/check_server_args.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checker_parses_a_stand_in_of_the_key_file_that_does_not_exist_yet(
    plan: Plan, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.parser_check import checked_command_lines

    checker = _checker(monkeypatch)
    instances = plan("b200", sglang_api_key="sk-x")["instances"][:2]
    lines = checked_command_lines(instances)
    assert not Path(instances[0]["config_file"]).exists(), "a first deploy: the key file is not there yet"
    argv = checker.with_stand_in(lines["sglang-30000"], str(tmp_path))
    stand_in = argv[argv.index("--config") + 1]
    assert stand_in != instances[0]["config_file"] and Path(stand_in).read_text() == "api-key: preflight-stand-in\n"
    assert argv[: argv.index("--config")] == instances[0]["argv"][:-2]
    parse = checker.runtime_parser("sglang_simulator.args:parse_args")
    assert checker.check(parse, argv) == {"rc": 0, "error": ""}
    # Without the stand-in the runtime's parser opens the missing file (as SGLang 0.5.23's ConfigArgumentMerger
    # does in prepare_server_args) and refuses the command line.
    assert checker.check(parse, instances[0]["argv"])["rc"] != 0
    assert checker.with_stand_in(["--port", "1"], str(tmp_path)) == ["--port", "1"], "plain argv lists still work"


def test_a_second_config_is_what_the_runtime_refuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Why `config` in sglang_server_args is refused: with the key's --config the unit would hold two."""
    checker = _checker(monkeypatch)
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("api-key: x\n")
    second.write_text("log-level: info\n")
    parse = checker.runtime_parser("sglang_simulator.args:parse_args")
    argv = ["--model-path", "/m", "--config", str(second), "--config", str(first)]
    assert checker.check(parse, argv)["rc"] != 0


def test_one_problem_per_variable_with_a_control_character(plan: Plan) -> None:
    result = plan(
        "b200",
        sglang_model_path="/srv/m\n",
        sglang_served_model_name="a\nb",
        sglang_server_args={"dtype": "auto\n", "tool-call-parser": "qwen3\r", "log-level\n": "info"},
    )
    assert result["instances"] == [], "nothing with a control character reaches a template"
    control = [p for p in result["problems"] if "control character" in p]
    assert len(control) == 5
    assert 'b200 host: sglang_server_args.log-level\\n="info": contains' in control[-1]
    assert all("\n" not in p and "\r" not in p for p in result["problems"]), "each problem stays one line"


def test_context_length_above_the_model_is_allowed_when_sglang_is_told_so(plan: Plan) -> None:
    allowed = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert plan("b200", sglang_server_args={"context-length": 300000}, sglang_environment=allowed)["problems"] == []
    assert plan("b200", sglang_server_args={"context-length": 262144})["problems"] == []


def test_kv_heads_fewer_than_tp_are_replicated_but_must_divide_it(
    support_tables: list[dict[str, Any]], model_facts: dict[str, Any]
) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    def problems(tp: int, heads: int, kv_heads: int) -> list[str]:
        model = {**model_facts, "num_attention_heads": heads, "num_key_value_heads": kv_heads}
        settings = plan_settings("b200", sglang_tensor_parallel_size=tp, sglang_gpus_per_instance=tp, sglang_instance_count=1)
        facts = host_facts("b200", model)
        return [p for p in sglang_plan(settings, facts, support_tables)["problems"] if "heads" in p]

    assert problems(4, 24, 4) == [] and problems(2, 24, 4) == []
    assert problems(4, 32, 2) == [], "tp 4 over 2 KV heads: each is replicated twice"
    (problem,) = problems(4, 32, 3)
    assert "3 KV heads can be neither split over nor replicated across 4 GPUs" in problem


def test_overrides_of_existing_instances_and_declared_variables_are_fine(plan: Plan) -> None:
    assert plan("b200", sglang_instance_overrides={"6": {"server_args": {"hicache-size": 10}}})["problems"] == []
    hostvars = {"b200": {"sglang_router_enabled": True, "cuda_apt_version": "13-0", "sglang_server_user": "x"}}
    assert plan("b200", hostvars=hostvars)["problems"] == []
    # The facts role sglang_model's preflight publishes (before the plan: the plan sees them as the host's variables).
    published: dict[str, Any] = {"b200": {"sglang_model_source": {}, "sglang_model_preflight_problems": []}}
    assert plan("b200", hostvars=published)["problems"] == []


def test_a_control_character_in_a_server_variable_renders_no_instance(plan: Plan) -> None:
    """sglang_server_home reaches the environment file (HOME), whose quoting refuses a new line: no instance may be
    rendered, even in preflight's check mode, so the server role's preflight can name the variable."""
    result = plan("b200", sglang_server_home="/var/lib/sglang\nX=1")
    assert result["instances"] == [] and result["problems"] == []
    assert len(plan("b200", sglang_server_home="/var/lib/sglang")["instances"]) == 7


def test_with_dp_attention_the_heads_are_split_over_tp_over_dp(
    support_tables: list[dict[str, Any]], model_facts: dict[str, Any]
) -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    facts = host_facts("b200", {**model_facts, "num_attention_heads": 3, "num_key_value_heads": 1})

    def heads_problems(**server_args: Any) -> list[str]:
        settings = plan_settings(
            "b200",
            sglang_tensor_parallel_size=2,
            sglang_data_parallel_size=2,
            sglang_gpus_per_instance=4,
            sglang_instance_count=1,
            sglang_server_args={"mem-fraction-static": 0.9, **server_args},
        )
        return [p for p in sglang_plan(settings, facts, support_tables)["problems"] if "heads" in p]

    (problem,) = heads_problems()
    assert "3 attention heads cannot be split over 2 GPUs" in problem
    assert heads_problems(**{"enable-dp-attention": True}) == [], "tp 2 / dp 2: each attention group holds every head"


def test_the_checker_runs_the_runtimes_setup_before_its_parser_as_the_runtimes_launcher_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SGLang's `sglang serve` loads its plugins (which may add flags) before prepare_server_args."""
    (tmp_path / "stand_in_runtime.py").write_text(
        "calls = []\ndef load_plugins():\n    calls.append('plugins')\ndef parse(argv):\n    calls.append(argv)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    checker = _checker(monkeypatch)
    parse = checker.runtime_parser("stand_in_runtime:parse", ["stand_in_runtime:load_plugins"])
    assert checker.check(parse, ["--port", "1"]) == {"rc": 0, "error": ""}
    import stand_in_runtime  # type: ignore[import-not-found]

    assert stand_in_runtime.calls == ["plugins", ["--port", "1"]]
