"""Flag parsing parity with the real SGLang parsers (0.5.23, the default, and 0.5.17)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_simulator.args import build_parser, parse_args, retired_flag_hints
from sglang_simulator.facts import Facts, available_releases, load_facts, release

from .simkit import Env, run_sim

DATA = Path(__file__).parent / "data"
GOLDENS = {
    path.name.removeprefix("parser_golden-").removesuffix(".json"): json.loads(path.read_text())
    for path in sorted(DATA.glob("parser_golden-*.json"))
}
GOLDEN = GOLDENS["0.5.23"]
CASES = [(version, case) for version, golden in GOLDENS.items() for case in golden["cases"]]

CT129 = [
    "--model-path", "/models/ct129", "--tp-size", "2",
    "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
    "--dtype", "bfloat16", "--trust-remote-code", "--port", "30000",
    "--host", "127.0.0.1", "--nccl-port", "31000",
]  # fmt: skip
B200 = [
    "--model-path", "/models/b200",
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer", "--mem-fraction-static", "0.90",
    "--max-running-requests", "512", "--context-length", "8192",
    "--enable-hierarchical-cache", "--hicache-size", "80",
    "--cuda-graph-max-bs-decode", "512", "--reasoning-parser", "qwen3",
    "--tool-call-parser", "qwen3_coder", "--trust-remote-code",
]  # fmt: skip


def _parse(argv: list[str], facts: Facts | None = None) -> tuple[int, list[str], dict[str, Any] | None]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parsed = vars(build_parser(facts).parse_args(argv))
        except SystemExit as exc:
            return int(exc.code or 0), err.getvalue().splitlines(), None
    return 0, err.getvalue().splitlines(), json.loads(json.dumps(parsed))


@pytest.mark.parametrize(("version", "case"), CASES, ids=[f"{v}-{c['name']}" for v, c in CASES])
def test_matches_real_parser(version: str, case: dict[str, Any]) -> None:
    """Same exit code, same error line, same namespace as the recorded real parser of that release."""
    code, lines, parsed = _parse(case["argv"], load_facts(version))
    assert code == case["exit_code"]
    if code:
        assert case["error"] in lines
    else:
        assert parsed == {**GOLDENS[version]["defaults"], **case["parsed"]}
        assert [line for line in lines if line.strip()] == case["warnings"]


def test_golden_was_recorded_from_the_pinned_release() -> None:
    assert GOLDEN["sglang_version"] == load_facts().sglang_version == "0.5.23"
    assert set(GOLDENS) == set(available_releases()) == {f"0.5.{n}" for n in range(17, 24)}
    for version, golden in GOLDENS.items():
        assert golden["sglang_version"] == load_facts(version).sglang_version == version


def test_release_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_SIM_VERSION", raising=False)
    assert release() == "0.5.23" and load_facts().sglang_version == "0.5.23"
    monkeypatch.setenv("SGLANG_SIM_VERSION", "0.5.17")
    assert release() == "0.5.17" and load_facts().sglang_version == "0.5.17"
    monkeypatch.setenv("SGLANG_SIM_VERSION", "0.4.0")
    with pytest.raises(ValueError, match=r"no table of SGLang 0\.4\.0"):
        release()


def test_cuda_graph_max_bs_is_a_deprecated_alias_in_0_5_17_only(sim_env: Env) -> None:
    argv = [*B200, "--cuda-graph-max-bs", "8"]
    old = run_sim("sglang_simulator.check_args", argv, {**sim_env.environ(), "SGLANG_SIM_VERSION": "0.5.17"})
    assert old.returncode == 0, old.stderr
    assert json.loads(old.stdout)["cuda_graph_max_bs_decode"] == 8, (
        "the alias sets --cuda-graph-max-bs-decode"
    )
    assert "'--cuda-graph-max-bs' is deprecated and will be removed in a future release." in old.stderr
    new = run_sim("sglang_simulator.check_args", argv, {**sim_env.environ(), "SGLANG_SIM_VERSION": "0.5.23"})
    assert new.returncode == 2
    assert "--cuda-graph-max-bs was removed in SGLang 0.5.23; use --cuda-graph-max-bs-decode" in new.stderr


@pytest.mark.parametrize(
    ("argv", "replacement"),
    [
        (["--cuda-graph-max-bs", "512"], "--cuda-graph-max-bs-decode"),
        (["--mamba-scheduler-strategy", "extra_buffer"], "--mamba-radix-cache-strategy"),
        (["--mamba-scheduler-strategy=extra_buffer"], "--mamba-radix-cache-strategy"),
    ],
)
def test_renamed_flag_names_its_replacement(argv: list[str], replacement: str) -> None:
    code, lines, _ = _parse(["--model-path", "/m", *argv])
    assert code == 2
    old = argv[0].split("=")[0]
    assert f"sglang serve: error: {old} was removed in SGLang 0.5.23; use {replacement}" in lines


def test_removed_flag_without_replacement() -> None:
    hints = retired_flag_hints(["--collect-tokens-histogram"], load_facts())
    assert hints == ["--collect-tokens-histogram was removed in SGLang 0.5.23 without a replacement"]


def test_unknown_and_ambiguous_exit_2() -> None:
    assert _parse(["--model-path", "/m", "--bogus"])[0] == 2
    code, lines, _ = _parse(["--model-path", "/m", "--enable"])
    assert code == 2 and "ambiguous option: --enable could match" in lines[-1]


def test_production_command_lines_parse() -> None:
    ct129 = parse_args(CT129)
    assert (ct129["tp_size"], ct129["speculative_algorithm"], ct129["nccl_port"]) == (2, "NEXTN", 31000)
    b200 = parse_args(B200)
    assert b200["mamba_radix_cache_strategy"] == "extra_buffer"
    assert b200["cuda_graph_max_bs_decode"] == 512 and b200["hicache_size"] == 80
    assert b200["mem_fraction_static"] == 0.9 and b200["context_length"] == 8192


def test_config_file_options_come_before_the_command_line(sim_env: Env, tmp_path: Path) -> None:
    config = tmp_path / "secret.yaml"
    config.write_text(
        '# options\napi-key: "s3cret key"\nport: 31000\ntrust-remote-code: true\nenable-metrics: false\n'
    )
    result = run_sim(
        "sglang_simulator.check_args",
        ["--model-path", "/m", "--config", str(config), "--port", "32000"],
        sim_env.environ(),
    )
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)
    assert settings["api_key"] == "s3cret key" and settings["trust_remote_code"] is True
    assert settings["port"] == 32000, "the command line wins over the file"
    assert settings["enable_metrics"] is False


def test_config_file_that_is_not_flat_or_not_yaml_is_refused(sim_env: Env, tmp_path: Path) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text("json-model-override-args:\n  a: 1\n")
    for path, message in ((str(nested), "flat mapping"), (str(tmp_path / "x.txt"), "must be YAML")):
        result = run_sim(
            "sglang_simulator.check_args", ["--model-path", "/m", "--config", path], sim_env.environ()
        )
        assert result.returncode == 2 and message in result.stderr


def test_check_args_cli(sim_env: Env) -> None:
    ok = run_sim("sglang_simulator.check_args", CT129, sim_env.environ())
    assert ok.returncode == 0, ok.stderr
    settings = json.loads(ok.stdout)
    assert settings["speculative_num_draft_tokens"] == 2 and settings["port"] == 30000
    assert "config" not in settings and "metrics_port" not in settings  # not ServerArgs fields
    bad = run_sim("sglang_simulator.check_args", [*B200, "--cuda-graph-max-bs", "8"], sim_env.environ())
    assert bad.returncode == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in bad.stderr
    assert "use --cuda-graph-max-bs-decode" in bad.stderr
