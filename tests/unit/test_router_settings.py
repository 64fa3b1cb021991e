"""Role sglang_router's settings and decisions in Python (plugins/filter/sglang_router_settings.py, issue 37), and the
fleet gateways' layout decided in one place (module_utils/gateways.py): a gateway on a host, a mesh, its peers, the URL
each gateway knows a host's workers by."""

from __future__ import annotations

from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import (
    sglang_router_checks,
    sglang_router_leave,
    sglang_router_probe_request,
    sglang_router_published,
)
from ansible_collections.sglang.fleet.plugins.module_utils.gateways import gateway_layout
from fleet import ROOT, router_settings

ROLE = ROOT / "roles/sglang_router"


def test_one_gateway_is_no_mesh_and_knows_its_own_host_s_workers_by_their_local_url() -> None:
    layout = gateway_layout("ct129", ["ct129", "ct129"])
    assert layout == {"gateways": ["ct129"], "gateway": True, "mesh": False, "in_mesh": False, "peers": [],
                      "worker_url": {"ct129": "url"}}  # fmt: skip
    other = gateway_layout("b200", ["ct129"])
    assert (other["gateway"], other["worker_url"]) == (False, {"ct129": "remote_url"})
    assert gateway_layout("b200", [])["gateways"] == []


def test_two_gateways_form_a_mesh_whose_peers_are_the_others_as_they_published_themselves() -> None:
    hostvars: dict[str, Any] = {
        "ct129": {"sglang_gateway": {"mesh": "10.0.0.2:39527"}},
        "b200": {"sglang_gateway": {"mesh": "10.0.0.3:39527"}},
        "c9": {"sglang_gateway": {"mesh": ""}},  # on loopback: no address to dial
    }
    layout = gateway_layout("ct129", ["ct129", "b200", "c9", "gone"], hostvars)
    assert (layout["mesh"], layout["in_mesh"], layout["peers"]) == (True, True, ["10.0.0.3:39527"])
    assert set(layout["worker_url"].values()) == {"remote_url"}, "in a mesh every gateway knows workers by remote_url"
    server = gateway_layout("d1", ["ct129", "b200"], hostvars)
    assert (server["gateway"], server["in_mesh"], server["peers"]) == (False, False, ["10.0.0.2:39527", "10.0.0.3:39527"])


def test_the_settings_a_gateway_host_publishes_and_the_host_s_router() -> None:
    settings = router_settings("ct129", sglang_router_enabled=True, sglang_router_admin_key="ra", sglang_gateway_admin_key="ga",
                               sglang_gateway_hosts=["ct129"], sglang_gateway_host="0.0.0.0", sglang_gateway_mesh_host="0.0.0.0",
                               sglang_api_key="sk")  # fmt: skip
    published = settings["published"]
    assert published["url"] == "http://127.0.0.1:30200" and published["remote_url"] == "http://10.0.0.2:30200"
    assert (published["keys_file"], published["admin_key"], published["mesh"]) == ("/etc/sglang-router/gateway.json", "ga",
                                                                                   "10.0.0.2:39527")  # fmt: skip
    assert published["api_key_digest"] == settings["api_key_digest"] != router_settings()["api_key_digest"]
    assert router_settings("b200", sglang_gateway_hosts=["ct129"])["published"] == {}, "no gateway here"
    router = sglang_router_published(settings, "ct129", {"ct129": {"sglang_gateway": published}}, ["ct129"])
    assert (router["url"], router["admin_key"]) == ("http://127.0.0.1:30100", "ra")
    assert router["keys_file"] == "/etc/sglang-router/router.json"
    assert [(route["host"], route["worker_url"]) for route in router["gateways"]] == [("ct129", "url")]
    off = sglang_router_published(router_settings("b200"), "b200", {}, ["b200"])
    assert off == {"url": "", "keys_file": "", "admin_key": "", "gateways": []}


def test_a_gateway_outside_the_run_is_refused_and_routes_nothing() -> None:
    settings = router_settings("b200", sglang_gateway_hosts=["ct129"])
    hostvars: dict[str, Any] = {"ct129": {}, "b200": {}}
    context = {"hostvars": hostvars, "server_hosts": ["ct129", "b200"], "play_hosts": ["b200"]}
    [problem] = sglang_router_checks(settings, "b200", context)
    assert problem.startswith('b200 gateway ct129: sglang_gateway_hosts="ct129": the gateway routes to this host')
    assert sglang_router_published(settings, "b200", hostvars, ["b200"])["gateways"] == []


def test_the_request_s_gateway_dials_its_peers_and_registers_the_run_s_workers() -> None:
    hostvars: dict[str, Any] = {
        "ct129": {"sglang_instances": [], "sglang_router": {"gateways": []}},
        "b200": {"sglang_gateway": {"mesh": "10.0.0.3:39527"}, "sglang_router": {"gateways": [{"host": "ct129"}]},
                 "sglang_instances": [{"unit": "sglang-30000.service", "url": "http://127.0.0.1:30000",
                                       "remote_url": "http://10.0.0.3:30000", "served_model_name": "q"}]},
    }  # fmt: skip
    settings = router_settings("ct129", sglang_gateway_hosts=["ct129", "b200"], sglang_gateway_host="0.0.0.0",
                               sglang_gateway_mesh_host="10.0.0.2")  # fmt: skip
    context = {"role_path": str(ROLE), "instances": [], "hostvars": hostvars, "server_hosts": ["ct129", "b200"],
               "run_hosts": ["ct129", "b200"], "write": True, "ask": True}  # fmt: skip
    request = sglang_router_probe_request(settings, "ct129", context)
    router, gateway = request["decide"]["processes"]
    assert (router["enabled"], gateway["enabled"]) == (False, True)
    assert gateway["workers"] == ["http://10.0.0.3:30000"]
    argv = gateway["argv"]
    assert argv[argv.index("--mesh-peer-urls") + 1] == "10.0.0.3:39527" and argv[argv.index("--mesh-host") + 1] == "10.0.0.2"
    assert [file["dest"] for file in request["files"] if file["dest"].endswith(".service")] == [
        "/etc/systemd/system/sglang-gateway.service"
    ]
    assert request["routers"][0]["url"] == "http://127.0.0.1:30200"
    assert sglang_router_probe_request(settings, "ct129", {**context, "write": False, "ask": False})["files"] == []


def test_removal_finds_the_routers_where_deploy_left_them() -> None:
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    own = {"sglang_gateway_hosts": ["ct129", "b200"], "sglang_gateway_host": "0.0.0.0", "sglang_gateway_port": 30200,
           "sglang_gateway_tls_cert": "/c.pem", "sglang_gateway_tls_ca": "", "sglang_router_enabled": False,
           "helper_dir": "/usr/local/lib/sglang-fleet"}  # fmt: skip
    hostvars = {"b200": {"sglang_gateway_port": 30300, "sglang_gateway_tls_ca": "/ca.pem"}}
    left = sglang_router_leave("ct129", hostvars, own)
    assert left["units"] == {"router": "sglang-router.service", "gateway": "sglang-gateway.service"}
    assert left["folders"] == ["/etc/sglang-router", "/var/lib/sglang-router"]
    assert (left["router_url"], left["router_keys_file"]) == ("", "")
    ct129, b200 = left["gateways"]
    assert (ct129["url"], ct129["ca_file"], ct129["worker_url"]) == ("https://127.0.0.1:30200", "", "remote_url")
    assert (b200["url"], b200["ca_file"]) == ("https://127.0.0.1:30300", "/usr/local/lib/sglang-fleet/gateway-ca.pem")
    assert defaults["sglang_router_port"] == 30100
    with_router = sglang_router_leave("ct129", {}, {"sglang_router_enabled": True, "sglang_router_host": "0.0.0.0",
                                                    "sglang_router_port": 30100})  # fmt: skip
    assert with_router["router_url"] == "http://127.0.0.1:30100"
    assert with_router["router_keys_file"] == "/etc/sglang-router/router.json"
    assert with_router["gateways"] == []


def test_vars_main_holds_no_settings_derived_in_jinja() -> None:
    """The role's vars: plain settings, and the run's reads (each one read of deploy's probe, or one filter call over
    this run's registered results); no structure of templates evaluated whenever a task reads it."""
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    templated = {name for name, value in role_vars.items() if "{{" in str(value)}
    assert templated == {"_sglang_router_pending", "_sglang_router_decision", "_sglang_router_enabled_processes",
                         "_sglang_router_first", "_sglang_router_bounced"}  # fmt: skip
    assert all(str(role_vars[name]).count("sglang.fleet.") <= 1 for name in templated)
