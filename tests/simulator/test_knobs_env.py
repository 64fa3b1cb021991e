"""Knob parsing, environment warnings and the --log-level crash."""

from __future__ import annotations

import pytest

from sglang_simulator.environment import deprecation_warnings, ignored_variables
from sglang_simulator.facts import load_facts
from sglang_simulator.knobs import KnobError, Knobs

from .simkit import Env, run_sim


def test_knob_defaults_and_validation() -> None:
    knobs = Knobs.from_env({})
    assert (knobs.load_seconds, knobs.warmup_seconds, knobs.token_seconds) == (2.0, 1.0, 0.001)
    assert str(knobs.gpus_file) == "/etc/sglang-simulator/gpus.json"
    assert str(knobs.state_dir) == "/run/sglang-simulator"
    assert Knobs.from_env({"SGLANG_SIM_HANG_LOADING": "yes"}).hang_loading
    with pytest.raises(KnobError):
        Knobs.from_env({"SGLANG_SIM_LOAD_SECONDS": "soon"})
    with pytest.raises(KnobError):
        Knobs.from_env({"SGLANG_SIM_ACCEPT_LENGTH": "0.5"})


def test_environment_classification() -> None:
    facts = load_facts()
    env = {
        "SGLANG_ENABLE_SPEC_V2": "1",
        "SGLANG_ENABLE_THINKING": "1",
        "SGLANG_HEALTH_CHECK_TIMEOUT": "20",  # read by 0.5.23
        "SGLANG_SIM_LOAD_SECONDS": "1",  # the simulator's own
        "SGL_DEFINITELY_NOT_A_SETTING": "1",
    }
    assert ignored_variables(env, facts) == [
        "SGLANG_ENABLE_SPEC_V2 (retired)",
        "SGLANG_ENABLE_THINKING (retired; use SGLANG_DEFAULT_THINKING)",
        "SGL_DEFINITELY_NOT_A_SETTING (unknown)",
    ]
    warnings = deprecation_warnings({"SGLANG_ENABLE_CP_V2": "1"}, facts)
    assert warnings and warnings[0].startswith(
        "UserWarning: Environment variable SGLANG_ENABLE_CP_V2 is deprecated."
    )


def test_bad_log_level_crashes_after_parsing(sim_env: Env) -> None:
    result = run_sim("sglang_simulator", ["--model-path", "/m", "--log-level", "verbose"], sim_env.environ())
    assert result.returncode == 1
    assert "AttributeError: module 'logging' has no attribute 'VERBOSE'" in result.stderr


def test_bad_knob_exits_1(sim_env: Env) -> None:
    result = run_sim(
        "sglang_simulator", ["--model-path", "/m"], sim_env.environ(SGLANG_SIM_TOKEN_SECONDS="x")
    )
    assert result.returncode == 1 and "SGLANG_SIM_TOKEN_SECONDS" in result.stderr
