"""Issue 37's move of role sglang_router's settings into Python (filter sglang_router_settings) keeps its secrets out of
what Ansible shows: the derived settings hold the clients' key and both admin keys (the processes' keys files and the
rollouts read them there), so every preflight fact that holds or reads them is set without logging (a set_fact's
result, facts included, is printed at -v), and no problem line of its checks shows a key."""

from __future__ import annotations

import json
from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_checks
from fleet import ROOT, router_settings

PREFLIGHT = ROOT / "roles/sglang_router/tasks/preflight.yml"
KEYS = {"sglang_api_key": "sk-CLIENT-SECRET", "sglang_router_admin_key": "ra-ADMIN-SECRET",
        "sglang_gateway_admin_key": "ga-ADMIN-SECRET"}  # fmt: skip
# What a fact holding or reading a key is made from: the variables themselves, or the settings derived from them.
SECRET_SOURCES = (*KEYS, "_sglang_router_settings")


def test_the_derived_settings_hold_every_key_and_each_fact_made_from_them_is_set_without_logging() -> None:
    settings = router_settings("ct129", sglang_router_enabled=True, sglang_gateway_hosts=["ct129"], **KEYS)
    text = json.dumps(settings)
    assert all(key in text for key in KEYS.values()), "the settings hold the keys: their fact is a secret"
    facts = [task for task in yaml.safe_load(PREFLIGHT.read_text()) if "ansible.builtin.set_fact" in task]
    secret = [task for task in facts if any(name in json.dumps(task["ansible.builtin.set_fact"]) for name in SECRET_SOURCES)]
    assert any("_sglang_router_settings" in task["ansible.builtin.set_fact"] for task in secret)
    assert [task["name"] for task in secret if task.get("no_log") is not True] == []


def test_no_problem_of_the_router_checks_shows_a_key() -> None:
    """A key among the extra flags, a control character in one, a gateway without TLS in a mesh, the servers' account:
    each refused, naming the variable, never the key."""
    settings = router_settings(
        "ct129",
        sglang_router_enabled=True,
        sglang_gateway_hosts=["ct129", "b200"],
        sglang_gateway_host="10.0.0.2",
        sglang_gateway_mesh_host="10.0.0.2",
        sglang_router_user="sglang",
        sglang_router_extra_args={"api-key": KEYS["sglang_api_key"], "admin_key": f"{KEYS['sglang_router_admin_key']}\n"},
        **KEYS,
    )
    hostvars: dict[str, Any] = {"ct129": {}, "b200": {}}
    problems = sglang_router_checks(settings, "ct129", {"hostvars": hostvars, "server_hosts": ["ct129", "b200"],
                                                         "play_hosts": ["ct129", "b200"]})  # fmt: skip
    for variable in ("sglang_router_extra_args.api-key", "sglang_router_extra_args.admin_key", "sglang_router_user",
                     "sglang_gateway_tls_cert"):  # fmt: skip
        assert any(f": {variable}=" in line for line in problems), (variable, problems)
    assert not [line for line in problems if any(key in line for key in KEYS.values())]
