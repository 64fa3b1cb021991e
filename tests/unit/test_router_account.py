"""The routers' account (sglang_router_user) must be one of their own: the role creates, changes (shell nologin, home
/var/lib/sglang-router) and removes it, and its group reads the routers' keys and the gateway's TLS key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_router_account_problems
from fleet import router_settings

SERVICE = {"user": "sglang", "group": "sglang-srv"}
ROLE = Path(__file__).resolve().parents[2] / "roles" / "sglang_router"


@pytest.mark.parametrize(
    ("user", "cause"),
    [("root", "root"), ("sglang", "the servers' account"), ("sglang-srv", "the servers' group"), ("", "an empty name")],
)
def test_root_the_servers_account_or_group_is_refused_naming_host_and_variable(user: str, cause: str) -> None:
    problems = sglang_router_account_problems("b200", user, SERVICE)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f'b200 router: sglang_router_user="{user}": '), problems
    assert cause in problems[0] and "fix:" in problems[0]


def test_the_servers_account_is_named_as_such_where_its_group_has_its_name() -> None:
    (problem,) = sglang_router_account_problems("b200", "sglang", {"user": "sglang", "group": "sglang"})
    assert "the servers' account" in problem


@pytest.mark.parametrize("user", ["sglang-router", "gw"])
def test_an_account_of_its_own_passes(user: str) -> None:
    assert sglang_router_account_problems("b200", user, SERVICE) == []


def test_deploys_preflight_checks_the_routers_account() -> None:
    """The role's preflight (its settings task, then filter sglang_router_checks) refuses the servers' account."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_checks

    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    problems = next(task for task in tasks if "sglang_router_preflight_problems" in task.get("ansible.builtin.set_fact", {}))
    expression = problems["ansible.builtin.set_fact"]["sglang_router_preflight_problems"]
    assert expression.strip().startswith("{{ _sglang_router_settings | sglang.fleet.sglang_router_checks(")
    context = {"hostvars": {}, "server_hosts": ["b200"], "play_hosts": ["b200"]}
    settings = router_settings("b200", sglang_router_user="sglang", sglang_service={**SERVICE, "helper_dir": "/h"})
    problems = sglang_router_checks(settings, "b200", context)
    assert any(line.startswith('b200 router: sglang_router_user="sglang"') for line in problems), problems
