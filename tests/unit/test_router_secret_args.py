"""A key among the router's extra flags would be written into its world-readable unit: preflight refuses it."""

from __future__ import annotations

import json

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_secret_args


@pytest.mark.parametrize(
    "name", ["tenant-api-key", "api-key", "--api-key", "control-plane-api-keys", "api", "tenant", "jwt-secret"]
)
def test_a_flag_that_may_carry_a_key_is_refused_and_its_value_never_shown(name: str) -> None:
    problems = sglang_router_secret_args("b200", {name: "sk-ROUTER-SECRET"})
    assert len(problems) == 1 and problems[0].startswith(f"b200 router: sglang_router_extra_args.{name}="), problems
    assert "sk-ROUTER-SECRET" not in json.dumps(problems)


@pytest.mark.parametrize(
    "name", ["policy", "cache-threshold", "tls-key-path", "client-key-path", "log-level", "health-check-port"]
)
def test_other_flags_and_key_files_pass(name: str) -> None:
    assert sglang_router_secret_args("b200", {name: "x"}) == []
