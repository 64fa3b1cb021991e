"""The fleet gateway's filters (plugins/filter/sglang_router.py): its workers from every host's plan, the routes a
rollout drains them from, the problems preflight reports, and how another host reaches a server (remote_url)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import (
    sglang_fleet_models,
    sglang_gateway_members,
    sglang_gateway_problems,
    sglang_gateway_routes,
    sglang_gateway_tls,
)
from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_url, remote_url, url_host
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout
from fleet import pem_files

KEY = hashlib.sha256(b"client-key").hexdigest()


def instance(port: int, remote: str = "") -> dict[str, Any]:
    return {
        "name": f"sglang-{port}",
        "unit": f"sglang-{port}.service",
        "url": f"http://127.0.0.1:{port}",
        # Another host's instance serves https (sglang_server_tls_cert): a keyed gateway reaches it over TLS only.
        "remote_url": remote and f"https://{remote}:{port}",
        "served_model_name": "qwen",
    }


def gateway_fact(**overrides: Any) -> dict[str, Any]:
    return {
        "url": "https://127.0.0.1:30200",
        "remote_url": "https://ct129:30200",
        "bind": "0.0.0.0",
        "keys_file": "/etc/sglang-fleet/secrets/gateway.json",
        "admin_key": "gateway-admin",
        "api_key_digest": KEY,
        **overrides,
    }


@pytest.fixture
def hostvars() -> dict[str, dict[str, Any]]:
    return {
        "ct129": {"sglang_instances": [instance(30000, "ct129")], "sglang_gateway": gateway_fact()},
        "b200": {"sglang_instances": [instance(30000, "b200"), instance(30001, "b200")]},
    }


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1", ""),
        ("::1", ""),
        ("0.0.0.0", "http://b200:30001"),
        ("10.0.0.7", "http://10.0.0.7:30001"),
        ("2001:db8::7", "http://[2001:db8::7]:30001"),
    ],
)
def test_another_host_reaches_a_server_at_its_bind_address_or_the_hosts_advertised_one(listen: str, expected: str) -> None:
    assert remote_url(listen, "b200", 30001) == expected


def test_an_ipv6_address_is_bracketed_in_every_url_and_target() -> None:
    """A server on every IPv6 address (::) is reached at the host's advertised IPv6 address, in brackets; the fleet's
    own clients reach a server bound to ::1 at [::1]; a bracketed or IPv4 address or a name is left as is."""
    assert remote_url("::", "2001:db8::7", 30001) == "http://[2001:db8::7]:30001"
    assert remote_url("::", "[2001:db8::7]", 30001) == "http://[2001:db8::7]:30001"
    assert connect_url("::1", 30100) == "http://[::1]:30100"
    assert connect_url("0.0.0.0", 30100) == connect_url("::", 30100) == "http://127.0.0.1:30100"
    assert connect_url("fe80::1%eth0", 30000) == "http://[fe80::1%eth0]:30000"
    assert [url_host(host) for host in ("b200", "10.0.0.7", "2001:db8::7")] == ["b200", "10.0.0.7", "[2001:db8::7]"]
    assert urlsplit(remote_url("2001:db8::7", "b200", 30001)).hostname == "2001:db8::7"
    assert urlsplit(remote_url("2001:db8::7", "b200", 30001)).port == 30001


def test_the_gateway_reaches_a_host_on_ipv6_at_its_bracketed_address(hostvars: dict[str, Any]) -> None:
    """b200's instances as a gateway on ct129 registers them when b200 listens on every address and advertises an
    IPv6 address; the gateway keeps the workers of that host, outside a limited run, by the same address."""
    b200 = [instance(port, "b200") | {"remote_url": remote_url("::", "2001:db8::7", port)} for port in (30000, 30001)]
    hostvars["b200"] = {"sglang_instances": b200, "sglang_advertise_host": "2001:db8::7"}
    hostvars["b200"]["sglang_router"] = {"gateways": sglang_gateway_routes(hostvars, "b200", ["ct129"])}
    members = sglang_gateway_members(hostvars, ["ct129", "b200"], "ct129", ["ct129", "b200"])
    assert members["workers"][1:] == ["http://[2001:db8::7]:30000", "http://[2001:db8::7]:30001"]
    keep = sglang_gateway_members(hostvars, ["ct129"], "ct129", ["ct129", "b200"])["keep"]
    assert keep == ["2001:db8::7"] == [urlsplit(url).hostname for url in members["workers"][1:2]]


def test_the_gateway_knows_its_own_instances_by_loopback_and_others_by_their_remote_url(hostvars: dict[str, Any]) -> None:
    hostvars["b200"]["sglang_router"] = {"gateways": sglang_gateway_routes(hostvars, "b200", ["ct129"])}
    members = sglang_gateway_members(hostvars, ["ct129", "b200"], "ct129", ["ct129", "b200"])
    urls = ["http://127.0.0.1:30000", "https://b200:30000", "https://b200:30001"]
    assert members == {"workers": urls, "models": dict.fromkeys(urls, "qwen"), "keep": [], "displaced": []}
    # b200's new shape stops its second instance first (drained from the gateway): the gateway registers it again.
    hostvars["b200"]["sglang_reshape"] = {"displaced": ["sglang-30001.service"]}
    assert sglang_gateway_members(hostvars, ["ct129", "b200"], "ct129", ["ct129", "b200"])["displaced"] == urls[2:]
    # A run limited to ct129 keeps b200's registered workers (by its address).
    assert sglang_gateway_members(hostvars, ["ct129"], "ct129", ["ct129", "b200"])["keep"] == ["b200"]
    # A host whose rollouts do not drain from this gateway (its sglang_gateway_hosts names another) is not registered.
    hostvars["b200"]["sglang_router"] = {"gateways": []}
    assert sglang_gateway_members(hostvars, ["ct129", "b200"], "ct129", ["ct129", "b200"])["workers"] == urls[:1]


def test_a_rollout_drains_from_the_gateway_as_its_host_reaches_it(hostvars: dict[str, Any]) -> None:
    assert sglang_gateway_routes(hostvars, "b200", ["ct129"], "/etc/s/gateway-ca.pem") == [
        {
            "host": "ct129",
            "url": "https://ct129:30200",
            "admin_key": "gateway-admin",
            "keys_file": "",
            "worker_url": "remote_url",
            "ca_file": "/etc/s/gateway-ca.pem",
        }
    ]
    assert sglang_gateway_routes(hostvars, "ct129", ["ct129"]) == [
        {
            "host": "ct129",
            "url": "https://127.0.0.1:30200",
            "admin_key": "gateway-admin",
            "keys_file": "/etc/sglang-fleet/secrets/gateway.json",
            "worker_url": "url",
            "ca_file": "",
        }
    ]


def problems(hostvars: dict[str, Any], host: str = "b200", **overrides: Any) -> list[str]:
    arguments: dict[str, Any] = {
        "gateways": ["ct129"],
        "hostvars": hostvars,
        "server_hosts": ["ct129", "b200"],
        "run_hosts": ["ct129", "b200"],
        "instances": hostvars[host]["sglang_instances"],
        "listen_host": "0.0.0.0",
        "api_key_digest": KEY,
        **overrides,
    }
    return list(sglang_gateway_problems(host, **arguments))


def test_a_fleet_the_gateway_can_reach_and_drain_has_no_problem(hostvars: dict[str, Any]) -> None:
    assert problems(hostvars) == []
    assert problems(hostvars, "ct129", listen_host="127.0.0.1", instances=[instance(30000)]) == [], "its own, on loopback"


def test_each_problem_names_the_host_the_gateway_and_the_variable(hostvars: dict[str, Any]) -> None:
    hostvars["ct129"]["sglang_gateway"] = gateway_fact(remote_url="", bind="127.0.0.1")
    found = problems(
        hostvars, listen_host="127.0.0.1", instances=[instance(30000)], api_key_digest=hashlib.sha256(b"other").hexdigest()
    )
    assert [line.split(":")[0] + ":" + line.split(":")[1].split("=")[0] for line in found] == [
        "b200 host: sglang_listen_host",
        "b200 host: sglang_api_key",
        "b200 gateway ct129: sglang_gateway_host",
    ]
    assert "client-key" not in "".join(found) and '"(not shown)"' in found[1]
    assert problems(hostvars, gateways=["gpu-box-9"]) == [
        'b200 gateway gpu-box-9: sglang_gateway_hosts="gpu-box-9": names no host of the group sglang_servers (a gateway '
        "runs in the SGLang venv of a server host); fix: name a host of sglang_servers"
    ]
    [limited] = problems(hostvars, run_hosts=["b200"])
    assert limited.startswith('b200 gateway ct129: sglang_gateway_hosts="ct129": the gateway routes to this host') and (
        "add ct129 to --limit" in limited
    )


def test_the_fleets_models_come_from_the_inventory_as_the_plan_names_them() -> None:
    hostvars = {
        "ct129": {"sglang_model": {"repo": "Qwen/Qwen3.6-27B", "revision": "abc"}},
        "b200": {"sglang_model_path": "/srv/models/Qwen3.6-27B/"},
        "h100": {"sglang_served_model_name": "coder", "sglang_model_path": "/srv/models/other"},
    }
    assert sglang_fleet_models(hostvars, ["ct129", "b200"]) == ["Qwen3.6-27B"], "one model: any worker serves it"
    assert sglang_fleet_models(hostvars, ["ct129", "b200", "h100"]) == ["Qwen3.6-27B", "coder"]


def test_the_routes_are_what_the_rollout_module_takes() -> None:
    """The fact the server role hands to sglang_rollout's `gateways` holds only the keys that option declares."""
    declared = set(sglang_rollout.ARGUMENT_SPEC["gateways"]["options"])
    hostvars = {"ct129": {"sglang_gateway": gateway_fact()}}
    [route] = sglang_gateway_routes(hostvars, "b200", ["ct129"])
    assert declared and set(route) <= declared, set(route) - declared


def test_a_gateway_other_hosts_reach_over_plain_http_is_refused(hostvars: dict[str, Any]) -> None:
    """Issue 38, finding 8: every host's rollouts send the gateway its admin key, its clients their key and prompts."""
    hostvars["ct129"]["sglang_gateway"] = gateway_fact(url="http://127.0.0.1:30200", remote_url="http://ct129:30200")
    for host in ("b200", "ct129"):
        [line] = problems(hostvars, host)
        assert line.startswith(f'{host} gateway ct129: sglang_gateway_tls_cert="": the gateway listens beyond loopback (0.0.0.0)')
        assert "sglang_gateway_tls_key" in line
    hostvars["ct129"]["sglang_gateway"] = gateway_fact(url="http://127.0.0.1:30200", remote_url="", bind="127.0.0.1")
    assert problems(hostvars, "ct129", listen_host="127.0.0.1", instances=[instance(30000)]) == [], "on loopback: plain"


ACCOUNT = {"user": "sglang-router", "group": "sglang-router", "config_dir": "/etc/sglang-router",
           "state_dir": "/var/lib/sglang-router"}  # fmt: skip
CA_DIR = "/usr/local/lib/sglang-fleet"


def tls_settings(gateway: bool, cert: str, key: str, ca: str) -> dict[str, object]:
    return {"gateway": gateway, "cert": cert, "key": key, "ca": ca, "ca_dir": CA_DIR}


def test_the_gateways_certificate_and_key_are_the_routers_account_to_read_and_the_ca_every_hosts(tmp_path: Path) -> None:
    gw_pem, gw_key, ca_pem = pem_files(tmp_path, "gw.pem", "gw.key", "ca.pem")
    tls = sglang_gateway_tls("ct129", tls_settings(True, gw_pem, gw_key, ca_pem), ACCOUNT)
    assert tls["enabled"] and tls["problems"] == [] and tls["absent"] == []
    # In the router's folder, root:<router's group> 0640: its account reads them, the servers' account does not.
    folder = "/etc/sglang-router"
    assert tls["files"] == [
        {"src": gw_pem, "dest": f"{folder}/gateway-tls.pem", "owner": "root", "group": "sglang-router", "mode": "0640"},
        {"src": gw_key, "dest": f"{folder}/gateway-tls.key", "owner": "root", "group": "sglang-router", "mode": "0640",
         "private": True},
        {"src": ca_pem, "dest": f"{CA_DIR}/gateway-ca.pem", "owner": "root", "group": "root", "mode": "0644"},
    ]  # fmt: skip
    assert (tls["cert_path"], tls["key_path"], tls["ca_file"]) == (
        "/etc/sglang-router/gateway-tls.pem",
        "/etc/sglang-router/gateway-tls.key",
        f"{CA_DIR}/gateway-ca.pem",
    )
    # Another host: the CA only; the gateway's files are removed where an earlier deploy left them.
    other = sglang_gateway_tls("b200", tls_settings(False, gw_pem, gw_key, ca_pem), ACCOUNT)
    assert [file["dest"] for file in other["files"]] == [f"{CA_DIR}/gateway-ca.pem"]
    assert other["absent"] == ["/etc/sglang-router/gateway-tls.pem", "/etc/sglang-router/gateway-tls.key"]
    assert (other["enabled"], other["cert_path"], other["ca_file"]) == (False, "", f"{CA_DIR}/gateway-ca.pem")
    plain = sglang_gateway_tls("ct129", tls_settings(True, "", "", ""), ACCOUNT)
    assert (plain["enabled"], plain["files"], plain["ca_file"], len(plain["absent"])) == (False, [], "", 3)


def test_the_tls_variables_problems_name_host_and_variable(tmp_path: Path) -> None:
    [gw_pem] = pem_files(tmp_path, "gw.pem")
    [half] = sglang_gateway_tls("ct129", tls_settings(True, gw_pem, "", ""), ACCOUNT)["problems"]
    assert half.startswith('ct129 gateway: sglang_gateway_tls_key="": the certificate and its key go together')
    bad = sglang_gateway_tls("ct129", tls_settings(True, "gw.pem", f"{tmp_path}/gw\n.key", str(tmp_path)), ACCOUNT)
    assert [line.split(":")[1].split("=")[0].strip() for line in bad["problems"]] == [
        "sglang_gateway_tls_cert",
        "sglang_gateway_tls_key",
        "sglang_gateway_tls_ca",
    ], "relative, a control character, a folder"
    missing = sglang_gateway_tls("ct129", tls_settings(True, gw_pem, gw_pem, f"{tmp_path}/ca.pem"), ACCOUNT)["problems"]
    assert [line.split(":")[0] for line in missing] == ["ct129 gateway"]
    assert f'sglang_gateway_tls_ca="{tmp_path}/ca.pem": not an absolute path of a file on the control node' in missing[0]
    assert bad["files"] == [], "nothing is written for a plan with a problem"
