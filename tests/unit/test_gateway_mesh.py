"""Issue 39: two fleet gateways in a mesh (filter sglang_gateway_mesh), on the flags and behaviour smg 1.13.0 showed
(tests/recordings/smg-1.13.0-mesh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.filter.sglang_role_settings import sglang_router_processes
from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_mesh
from fleet import router_settings

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"
MESH = json.loads((RECORDINGS / "smg-1.13.0-mesh/mesh-answers.json").read_text())
MESH_NAMES = json.loads((RECORDINGS / "smg-1.13.0-mesh/mesh-names-answers.json").read_text())
MESH_TLS = json.loads((RECORDINGS / "smg-1.13.0-mesh/mesh-tls-answers.json").read_text())
HELP = (RECORDINGS / "smg-1.13.0-tls/smg-1.13.0-launch-router-help.txt").read_text()
TLS = {"cert_path": "/etc/s/gateway-tls.pem", "key_path": "/etc/s/gateway-tls.key", "ca_file": "/etc/s/gateway-ca.pem"}


def settings(**changes: Any) -> dict[str, Any]:
    return {"gateway": True, "gateways": ["ct129", "b200"], "bind": "0.0.0.0", "port": 39527, "advertise": "10.0.0.2",
            "peers": ["10.0.0.3:39527"], "tls": TLS, "instances": [], "taken": {}, "listening": [], **changes}  # fmt: skip


def test_two_gateways_form_a_mesh_over_tls_with_the_flags_smg_takes() -> None:
    mesh = sglang_gateway_mesh("ct129", settings())
    assert mesh["problems"] == [] and mesh["enabled"] is True
    assert mesh["args"] == [
        "--enable-mesh", "--mesh-server-name", "ct129", "--mesh-host", "0.0.0.0", "--mesh-port", "39527",
        "--mesh-advertise-host", "10.0.0.2", "--mesh-peer-urls", "10.0.0.3:39527",
        "--mesh-tls-ca-cert", "/etc/s/gateway-ca.pem", "--mesh-tls-cert", "/etc/s/gateway-tls.pem",
        "--mesh-tls-key", "/etc/s/gateway-tls.key",
    ]  # fmt: skip
    flags = {word for word in mesh["args"] if word.startswith("--")}
    assert all(f"  {flag} " in HELP or f"  {flag}\n" in HELP for flag in flags), "every flag is smg 1.13.0's"
    # The recorded gateways ran with the same flags (on loopback, without and with TLS).
    recorded = {word for word in MESH["argv b"] + MESH_TLS["server-and-client-auth"]["argv b"] if word.startswith("--")}
    assert flags - {"--mesh-advertise-host"} <= recorded


def test_a_specific_bind_advertises_itself_and_a_lone_gateway_runs_no_mesh() -> None:
    mesh = sglang_gateway_mesh("ct129", settings(bind="10.0.0.2"))
    assert "--mesh-advertise-host" not in mesh["args"] and mesh["problems"] == []
    assert sglang_gateway_mesh("ct129", settings(gateways=["ct129"])) == {"enabled": False, "args": [], "problems": []}
    assert sglang_gateway_mesh("b200", settings(gateway=False))["args"] == [], "a host that runs no gateway"


def test_each_mesh_problem_names_the_host_and_the_variable() -> None:
    [loopback] = sglang_gateway_mesh("ct129", settings(bind="127.0.0.1"))["problems"]
    assert loopback.startswith('ct129 gateway: sglang_gateway_mesh_host="127.0.0.1": the mesh of the fleet gateways')
    # Recorded: smg refuses --mesh-host 0.0.0.0 without --mesh-advertise-host.
    assert MESH["--mesh-host 0.0.0.0 without --mesh-advertise-host"]["returncode"] == 1
    [unspecified] = sglang_gateway_mesh("ct129", settings(advertise="0.0.0.0"))["problems"]
    assert unspecified.startswith('ct129 gateway: sglang_advertise_host="0.0.0.0": the mesh binds 0.0.0.0')
    # Recorded: smg's mesh takes IP addresses only (a name for the advertised address or a peer: exit 1).
    assert MESH_NAMES["--mesh-advertise-host localhost"]["returncode"] == 1
    assert MESH_NAMES["--mesh-peer-urls localhost:31527"]["returncode"] == 1
    [named] = sglang_gateway_mesh("ct129", settings(advertise="ct129"))["problems"]
    assert named.startswith('ct129 gateway: sglang_advertise_host="ct129": the mesh binds 0.0.0.0 and advertises')
    [named_bind] = sglang_gateway_mesh("ct129", settings(bind="ct129.example"))["problems"]
    assert named_bind.startswith('ct129 gateway: sglang_gateway_mesh_host="ct129.example": smg\'s mesh binds an IP')
    v6 = MESH_NAMES["IPv6: --mesh-host ::1, --mesh-peer-urls [::1]:31527"]["b after POST on a"]
    assert v6[-1][1] == [["http://127.0.0.1:31000", "ready", True]], "recorded: a bracketed IPv6 peer joins"
    ipv6 = sglang_gateway_mesh("ct129", settings(bind="::", advertise="fd00::2", peers=["[fd00::3]:39527"]))
    assert ipv6["problems"] == [] and ipv6["args"][7:11] == [
        "--mesh-advertise-host",
        "fd00::2",
        "--mesh-peer-urls",
        "[fd00::3]:39527",
    ]
    [plain] = sglang_gateway_mesh("ct129", settings(tls={"cert_path": "", "key_path": "", "ca_file": ""}))["problems"]
    assert plain.startswith('ct129 gateway: sglang_gateway_tls_cert="": the mesh of the fleet gateways would be clear text')
    [no_ca] = sglang_gateway_mesh("ct129", settings(tls={**TLS, "ca_file": ""}))["problems"]
    assert no_ca.startswith('ct129 gateway: sglang_gateway_tls_ca="":')
    assert "--mesh-tls-cert" not in sglang_gateway_mesh("ct129", settings(tls={**TLS, "ca_file": ""}))["args"]


def test_the_mesh_port_must_be_free() -> None:
    instance = {"name": "sglang-39527", "port": 39527, "nccl_port": 31000}
    [instance_port] = sglang_gateway_mesh("ct129", settings(instances=[instance]))["problems"]
    assert "sglang_gateway_mesh_port=39527: port 39527 is sglang-39527" in instance_port
    [router] = sglang_gateway_mesh("ct129", settings(taken={39527: "the gateway's port"}))["problems"]
    assert "port 39527 is the gateway's port" in router
    other = [{"port": 39527, "pid": 7, "name": "nc", "unit": ""}]
    [taken] = sglang_gateway_mesh("ct129", settings(listening=other))["problems"]
    assert "port 39527 is taken by PID 7 (nc)" in taken
    ours = [{"port": 39527, "pid": 8, "name": "python3", "unit": "sglang-gateway.service"}]
    assert sglang_gateway_mesh("ct129", settings(listening=ours))["problems"] == [], "the gateway's own mesh"


def test_the_gateway_runs_with_its_mesh_flags() -> None:
    spec = {"enabled": True, "unit": "sglang-gateway.service", "url": "https://127.0.0.1:30200", "host": "0.0.0.0",
            "port": 30200, "prometheus_host": "0.0.0.0", "prometheus_port": 29200, "keys_file": "/k",
            "workers_file": "/w", "mesh_args": ["--enable-mesh", "--mesh-port", "39527"]}  # fmt: skip
    router = {**spec, "enabled": False, "unit": "sglang-router.service", "mesh_args": []}
    _router, gateway = sglang_router_processes([], {"router": router, "gateway": spec})
    assert gateway["argv"][-3:] == ["--enable-mesh", "--mesh-port", "39527"]
    assert "--enable-mesh" not in _router["argv"]


def test_the_recording_shows_what_the_fleet_builds_on() -> None:
    """What README.md says of the mesh, as recorded: workers registered on one gateway are listed on the other, the
    survivor serves with its peer stopped, a restarted gateway takes its peer's workers, and a certificate for
    serverAuth alone never joins a mesh over TLS."""
    assert MESH["b after POST on a"][-1][1] == [["http://127.0.0.1:31000", "ready", True],
                                               ["http://127.0.0.1:31001", "ready", True]]  # fmt: skip
    for moment in ("b while a is stopped", "b 10 s after a stopped"):
        assert MESH[moment]["GET /readiness"]["status"] == 200 and MESH[moment]["POST /v1/chat/completions"] == 200
    assert MESH["a after restart (peer b)"][-1][1] == [["http://127.0.0.1:31000", "ready", True]]
    assert MESH["a after POST on b"][-1][1] == [["http://127.0.0.1:31000", "ready", True]], "a URL a removed: ignored"
    assert MESH_TLS["server-auth"]["b after POST on a"] == [[0.0, []]]
    assert MESH_TLS["server-and-client-auth"]["b after POST on a"][-1][1] == [["http://127.0.0.1:31000", "ready", True]]
    assert MESH_TLS["server-and-client-auth"]["a after POST on c"][-1][1] == [["http://127.0.0.1:31000", "ready", True]], (
        "a gateway without TLS joins no mesh over TLS"
    )


def test_a_certificate_that_would_never_join_the_mesh_is_refused(tmp_path: Path) -> None:
    """Recorded (mesh-tls-answers.json, mesh-names-answers.json): a certificate for serverAuth alone, or that names the
    node by DNS alone, serves https but its mesh never joins, silently; preflight reads the control node's file."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import test_ca

    test_ca.make(tmp_path / "good", ["ct129", "10.0.0.2"])
    test_ca.make(tmp_path / "server", ["ct129", "10.0.0.2"], usages=test_ca.USAGES[:1])
    test_ca.make(tmp_path / "named", ["ct129"])
    assert sglang_gateway_mesh("ct129", settings(cert=str(tmp_path / "good/server.pem")))["problems"] == []
    [server_only] = sglang_gateway_mesh("ct129", settings(cert=str(tmp_path / "server/server.pem")))["problems"]
    assert "sglang_gateway_tls_cert=" in server_only and "does not allow clientAuth" in server_only
    [named] = sglang_gateway_mesh("ct129", settings(cert=str(tmp_path / "named/server.pem")))["problems"]
    assert "does not name 10.0.0.2, the IP address the mesh's peers dial" in named
    [missing] = sglang_gateway_mesh("ct129", settings(cert=str(tmp_path / "none.pem")))["problems"]
    assert "cannot be read as a PEM certificate" in missing


def test_in_a_mesh_every_gateway_knows_the_workers_by_their_remote_url() -> None:
    """The mesh hands a worker's URL as it is to the other gateways (recorded: `Registered mesh-synced worker`), where
    a gateway's own loopback URL would name another host: in a mesh a gateway registers its own instances, and the
    rollouts drain them from it, by remote_url too."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_members, sglang_gateway_routes

    instance = {"url": "http://127.0.0.1:30000", "remote_url": "http://10.0.0.2:30000", "served_model_name": "q"}
    gateway = {"url": "https://127.0.0.1:30200", "remote_url": "https://10.0.0.2:30200", "admin_key": "k"}
    hostvars = {"ct129": {"sglang_instances": [instance], "sglang_router": {"gateways": []}, "sglang_gateway": gateway}}
    alone = sglang_gateway_members(hostvars, ["ct129"], "ct129", ["ct129"])
    meshed = sglang_gateway_members(hostvars, ["ct129"], "ct129", ["ct129"], mesh=True)
    assert alone["workers"] == ["http://127.0.0.1:30000"] and meshed["workers"] == ["http://10.0.0.2:30000"]
    assert sglang_gateway_routes(hostvars, "ct129", ["ct129"])[0]["worker_url"] == "url"
    assert sglang_gateway_routes(hostvars, "ct129", ["ct129"], mesh=True)[0]["worker_url"] == "remote_url"
    assert (
        "127.0.0.1" in "".join(MESH["argv b"])
        and "Registered mesh-synced worker" in (RECORDINGS / "smg-1.13.0-mesh/mesh-log-b.txt").read_text()
    )


def test_in_a_mesh_a_gateway_s_own_instances_on_loopback_are_refused() -> None:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router import sglang_gateway_problems

    gateway = {"url": "https://127.0.0.1:30200", "remote_url": "https://10.0.0.2:30200", "api_key_digest": "d"}
    hostvars = {"ct129": {"sglang_gateway": gateway}, "b200": {"sglang_gateway": gateway}}
    loopback = [{"url": "http://127.0.0.1:30000", "remote_url": ""}]
    args = (["ct129"], hostvars, ["ct129", "b200"], ["ct129", "b200"], loopback, "127.0.0.1", "d")
    assert sglang_gateway_problems("ct129", *args) == [], "one gateway reaches its own host's instances on loopback"
    [line] = sglang_gateway_problems("ct129", *args, mesh=True)
    assert line.startswith('ct129 host: sglang_listen_host="127.0.0.1": the gateway on ct129 routes to this host')
    assert "in a mesh every gateway registers them by their remote_url" in line


def test_the_mesh_port_clashes_with_the_routers_ports_only_where_the_router_runs() -> None:
    """The role's preflight (its settings task, filter sglang_router_settings, then filter sglang_router_checks): a mesh
    port equal to the router's port is refused where the host runs its router, and is free where it does not (as the
    gateway's own ports are checked, filter sglang_router_problems with the router's ports only where it runs)."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_checks

    found = {}
    for enabled in (True, False):
        settings = router_settings("localhost", sglang_gateway_hosts=["localhost", "b200"], sglang_router_enabled=enabled,
                                   sglang_gateway_mesh_host="10.0.0.2", sglang_gateway_mesh_port=30100)  # fmt: skip
        assert settings["layout"]["in_mesh"] is True
        hosts = ["localhost", "b200"]
        context = {"instances": [], "listening": [], "hostvars": {"localhost": {}, "b200": {}}, "server_hosts": hosts,
                   "play_hosts": hosts, "listen_host": "0.0.0.0"}  # fmt: skip
        found[enabled] = [line for line in sglang_router_checks(settings, "localhost", context) if "mesh" in line]
    with_router, without_router = found[True], found[False]
    assert any("sglang_gateway_mesh_port=30100: port 30100 is the router's port" in line for line in with_router)
    assert not any("port 30100" in line for line in without_router), without_router
    assert without_router, "the mesh's other problems (no TLS here) are still found"
