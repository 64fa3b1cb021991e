"""A key goes only to the process it belongs to (issue 38, finding 2).

A local port is free while its router restarts and while SGLang loads its model; any local account can bind it
first. A squatter here is a process of its own (a small HTTP server the test starts), recording every request's
Authorization header; it must receive none, and the operation fails naming the port and the process.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import listeners, sglang_router_client
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_readiness import http_json, http_status
from ansible_collections.sglang.fleet.plugins.modules import sglang_rollout
from ansible_collections.sglang.fleet.plugins.modules import sglang_router_members as members
from fleet import ROOT, install_router_launcher
from simulator.simkit import free_port

KEY = "sk-fleet-secret-key-0123456789"
SQUATTER = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
seen = open(sys.argv[2], "a")
class Handler(BaseHTTPRequestHandler):
    def answer(self):
        seen.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization")}) + "\\n")
        seen.flush()
        body = b'{"workers": [], "version": "0.5.23"}'
        status = 200 if self.path != "/workers" or self.command == "GET" else 202
        self.send_response(404 if self.path.startswith("/missing") else status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_DELETE = answer
    def log_message(self, *args):
        pass
server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("listening", flush=True)
server.serve_forever()
"""


@dataclass
class Squatter:
    port: int
    pid: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> list[str | None]:
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(line)["authorization"] for line in text.splitlines()]


@pytest.fixture
def squatter(tmp_path: Path) -> Iterator[Squatter]:
    port, log = free_port(), tmp_path / "seen.jsonl"
    process = subprocess.Popen([sys.executable, "-c", SQUATTER, str(port), str(log)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "listening"
    yield Squatter(port, process.pid, log)
    process.terminate()
    process.wait(timeout=10)


def refused(squatter: Squatter, error: BaseException) -> None:
    message = str(error)
    assert f"port {squatter.port} is held by PID {squatter.pid} (python" in message, message
    assert "no key was sent" in message
    assert KEY not in message
    assert all(header is None for header in squatter.headers()), "the squatter received a key"


def test_the_router_client_sends_the_admin_key_to_no_squatter(squatter: Squatter) -> None:
    with pytest.raises(listeners.ListenerError) as raised:
        sglang_router_client.list_workers(squatter.url, api_key=KEY)
    refused(squatter, raised.value)
    assert "sglang-gateway.service or sglang-router.service" in str(raised.value)


def test_the_rollout_and_status_send_the_api_key_to_no_squatter_on_an_instance_port(squatter: Squatter) -> None:
    """Real SGLang binds its port only after loading: /server_info with the key must not reach a squatter."""
    assert http_status(f"{squatter.url}/health_generate") == 200, "a keyless probe is no secret"
    with pytest.raises(listeners.ListenerError) as raised:
        http_json(f"{squatter.url}/server_info", api_key=KEY)
    refused(squatter, raised.value)
    assert f"sglang-{squatter.port}.service: no key was sent" in str(raised.value)
    with pytest.raises(listeners.ListenerError):
        sglang_rollout.router_for(squatter.url, [KEY])
    refused(squatter, raised.value)


def test_the_members_module_sends_no_key_to_a_squatting_worker_or_router(squatter: Squatter) -> None:
    with pytest.raises(listeners.ListenerError) as raised:
        members.worker_ready(squatter.url, "/health_generate", api_key=KEY)
    refused(squatter, raised.value)
    with pytest.raises(listeners.ListenerError):
        members.reconcile(squatter.url, [], api_key=KEY)
    refused(squatter, raised.value)


def test_the_probe_s_router_check_names_the_squatter_and_sends_nothing(squatter: Squatter) -> None:
    differences = sglang_router_client.routers_differences([{"url": squatter.url, "workers": [], "api_key": KEY}])
    assert f"port {squatter.port} is held by PID {squatter.pid}" in differences[squatter.url]
    assert squatter.headers() == []


def test_a_router_request_without_a_key_is_checked_too(squatter: Squatter) -> None:
    """A registration's body carries the workers' key even when the router has no admin key."""
    with pytest.raises(listeners.ListenerError):
        sglang_router_client.add_worker(squatter.url, "http://127.0.0.1:30000", worker_api_key=KEY)
    assert squatter.headers() == []


def test_the_connection_itself_is_checked_so_binding_after_a_check_gains_nothing(squatter: Squatter) -> None:
    """The process at the other end of the very connection the key would go over is checked, not the port before."""
    connection = socket.create_connection(("127.0.0.1", squatter.port))
    with connection, pytest.raises(listeners.ListenerError, match=f"PID {squatter.pid}"):
        listeners.verify_connection(connection, squatter.url, {"sglang-router.service"})
    # A listener of this process (the tests' own unit) that has not accepted yet: its queue is the port's listeners'.
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as waiting:
        listeners.verify_connection(waiting, "http://127.0.0.1", {"sglang-router.service"})
        accepted, _ = server.accept()
        with accepted:
            listeners.verify_connection(waiting, "http://127.0.0.1", {"sglang-router.service"})


def test_the_expected_unit_s_listener_gets_the_key(monkeypatch: pytest.MonkeyPatch, squatter: Squatter) -> None:
    """The same process, as the unit it is meant to be (its cgroup read from /proc), gets the key."""
    real = listeners.unit_of
    router = "sglang-router.service"
    monkeypatch.setattr(listeners, "unit_of", lambda pid, proc="/proc": router if pid == squatter.pid else real(pid))
    assert sglang_router_client.list_workers(squatter.url, api_key=KEY) == []
    assert squatter.headers() == [f"Bearer {KEY}"]


def test_a_verified_request_goes_straight_to_its_listener_and_fails_as_open_url_does(
    monkeypatch: pytest.MonkeyPatch, squatter: Squatter
) -> None:
    """A request with a key never goes through a proxy the environment names (the connection checked is the one to
    the listener); an HTTP error status raises urllib.error.HTTPError, as Ansible's open_url (the unverified path)."""
    import urllib.error

    real = listeners.unit_of
    unit = f"sglang-{squatter.port}.service"
    monkeypatch.setattr(listeners, "unit_of", lambda pid, proc="/proc": unit if pid == squatter.pid else real(pid))
    dead = free_port()
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert http_json(f"{squatter.url}/server_info", api_key=KEY) == {"workers": [], "version": "0.5.23"}
    with pytest.raises(urllib.error.HTTPError) as raised:
        listeners.open_url(f"{squatter.url}/missing?x=1", {unit}, 10, headers={"Authorization": f"Bearer {KEY}"})
    assert raised.value.code == 404 and json.loads(raised.value.read()) == {"workers": [], "version": "0.5.23"}
    assert squatter.headers() == [f"Bearer {KEY}", f"Bearer {KEY}"]
    assert [json.loads(line)["path"] for line in squatter.log.read_text().splitlines()] == ["/server_info", "/missing?x=1"]


def test_nothing_listening_finds_no_answer() -> None:
    port = free_port()
    with pytest.raises(sglang_router_client.RouterError, match="no answer"):
        sglang_router_client.list_workers(f"http://127.0.0.1:{port}", api_key=KEY)


def test_only_this_host_s_addresses_are_checked() -> None:
    assert listeners.is_local("127.0.0.1") and listeners.is_local("localhost") and listeners.is_local("::1")
    assert listeners.is_local("0.0.0.0")
    assert not listeners.is_local("192.0.2.10"), "TEST-NET-1 is nobody's address here"
    assert not listeners.is_local("host.invalid")


def load_launcher() -> object:
    """The launcher as the role installs it, with the collection's listeners.py beside it (tests/fleet.py)."""
    import importlib.util
    import tempfile

    installed = install_router_launcher(Path(tempfile.mkdtemp(prefix="helpers-")))
    spec = importlib.util.spec_from_file_location("launcher", installed)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_router_launcher_registers_nothing_with_a_squatter_on_its_router_s_port(
    squatter: Squatter, capsys: pytest.CaptureFixture[str]
) -> None:
    """During a router restart: the launcher's router (this process here) does not hold the port the squatter took."""
    launcher = load_launcher()
    workers = [{"url": "http://127.0.0.1:30000", "model_id": "m"}]
    keys = {"api_key": KEY, "admin_key": "admin-" + KEY}
    started = time.monotonic()
    not_registered = launcher.register(squatter.url, workers, keys, timeout=10, router_pid=os.getpid())  # type: ignore[attr-defined]
    assert not_registered == ["http://127.0.0.1:30000"] and time.monotonic() - started < 10
    assert squatter.headers() == [None], "only the keyless /liveness reached it"
    assert f"port {squatter.port} is held by a process other than this router" in capsys.readouterr().err


def test_the_router_launcher_registers_with_its_own_router(squatter: Squatter) -> None:
    launcher = load_launcher()
    workers = [{"url": "http://127.0.0.1:30000", "model_id": "m"}]
    keys = {"api_key": KEY, "admin_key": "admin-" + KEY}
    assert launcher.register(squatter.url, workers, keys, timeout=10, router_pid=squatter.pid) == []  # type: ignore[attr-defined]
    assert squatter.headers() == [None, f"Bearer admin-{KEY}"]


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("0::/system.slice/sglang-30000.service", "sglang-30000.service"),
        # The sandbox's test hosts: systemd in a container, the host's cgroup namespace (v1 lines and the v2 line).
        (
            "9:name=systemd:/docker/bf71/system.slice/sglang-router.service\n0::/docker/bf71/system.slice/sglang-router.service",
            "sglang-router.service",
        ),
        # Any logged-in user: `systemd-run --user --unit=sglang-30000 …`, or cgroups of their own in their delegated tree.
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-30000.service", None),
        ("0::/user.slice/user-1000.slice/user@1000.service/system.slice/sglang-30000.service", None),
        ("0::/user.slice/user-1000.slice/session-3.scope", None),
        # A sub-cgroup of a service is not the service's own process.
        ("0::/system.slice/sglang-30000.service/payload", None),
    ],
)
def test_only_a_system_service_s_own_cgroup_names_a_unit(tmp_path: Path, cgroup: str, unit: str | None) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(cgroup + "\n")
    assert listeners.unit_of(42, str(tmp_path)) == unit


def test_an_ipv6_link_local_address_of_this_host_is_local(tmp_path: Path) -> None:
    """A link-local address binds only with its interface's scope id, which a URL may not carry: the previous check
    found it not this host's and sent a key to any process listening there, unchecked."""
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "if_inet6").write_text(
        "fe8000000000000000fc00fffe000001 02 40 20 80     eth0\n00000000000000000000000000000001 01 80 10 80       lo\n"
    )
    assert listeners._bindable(ipaddress.ip_address("fe80::fc:ff:fe00:1"), str(tmp_path))
    assert not listeners._bindable(ipaddress.ip_address("fe80::fc:ff:fe00:2"), str(tmp_path)), "another host's"
    assert listeners._bindable(ipaddress.ip_address("fe80::fc:ff:fe00:2"), str(tmp_path / "missing")), "unknown: checked"


def test_an_https_url_without_a_port_names_port_443_s_instance() -> None:
    assert listeners.instance_unit("https://10.0.0.5/v1/models") == "sglang-443.service"
    assert listeners.instance_unit("http://10.0.0.5/v1/models") == "sglang-80.service"


def test_the_router_launcher_without_its_listeners_check_sends_no_key(squatter: Squatter) -> None:
    """The launcher carries no copy of the check (it runs the collection's listeners.py installed beside it): where that
    file is missing, it fails closed, even towards its own router."""
    import importlib.util

    launcher_source = ROOT / "roles/sglang_router/files/sglang_router_launcher.py"
    assert "/proc/net/tcp" not in launcher_source.read_text(), "the launcher reads /proc only through listeners.py"
    spec = importlib.util.spec_from_file_location("bare_launcher", launcher_source)  # nothing beside it
    assert spec and spec.loader
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    workers = [{"url": "http://127.0.0.1:30000", "model_id": "m"}]
    keys = {"api_key": KEY, "admin_key": "admin-" + KEY}
    assert launcher.register(squatter.url, workers, keys, timeout=10, router_pid=squatter.pid) == ["http://127.0.0.1:30000"]
    assert squatter.headers() == [None], "only the keyless /liveness reached it"


def test_the_launcher_reads_the_sockets_before_what_its_router_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection waiting in the queue when the launcher looks is accepted a moment later by its router: read in the
    other order, the accepted socket is missing from what the router holds and the router's own connection was refused
    (a registration lost under load, 3 of 8 parallel runs here)."""
    launcher = load_launcher()
    check = launcher.listeners()  # type: ignore[attr-defined]
    order: list[str] = []
    accepted_inode = 4242

    def connection_inode(server: object, client: object, proc: str = "/proc") -> int:
        order.append("sockets")
        return accepted_inode

    def socket_owners(proc: str = "/proc", pids: object = None) -> dict[int, int]:
        order.append("held")
        return {accepted_inode: 1} if "sockets" in order else {}  # the router accepts it between the two reads

    monkeypatch.setattr(check, "connection_inode", connection_inode)
    monkeypatch.setattr(check, "socket_owners", socket_owners)
    monkeypatch.setattr(launcher, "listeners", lambda: check)
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        assert launcher.held_by(client, server.getsockname()[1], 1)  # type: ignore[attr-defined]
    assert order.index("sockets") < order.index("held")


def test_the_api_key_goes_to_no_instance_of_another_host_over_plain_http(
    monkeypatch: pytest.MonkeyPatch, squatter: Squatter
) -> None:
    """The rollout's canary probes its model's instances on other hosts too (their remote_url, plain HTTP): the key
    would cross the network in the clear. The squatter stands in for another host's instance (its address read as
    not this host's); it gets the keyless requests only."""
    monkeypatch.setattr(listeners, "is_local", lambda host: False)
    with pytest.raises(listeners.ListenerError) as raised:
        http_json(f"{squatter.url}/generate", {"text": "probe"}, api_key=KEY)
    assert "another host's, over plain HTTP: no key was sent" in str(raised.value)
    assert KEY not in str(raised.value)
    assert squatter.headers() == []
    assert http_json(f"{squatter.url}/server_info") == {"workers": [], "version": "0.5.23"}
    assert squatter.headers() == [None]


BENCH_CLIENT = ROOT / "playbooks/files/bench_client.py"


def run_bench_client(url: str, key: str) -> subprocess.CompletedProcess[str]:
    """As playbooks/bench.yml runs it on a host: the program on the command line, the key and then the collection's
    listeners.py on standard input."""
    listeners_source = (ROOT / "plugins/module_utils/listeners.py").read_text()
    return subprocess.run(
        [sys.executable, "-c", BENCH_CLIENT.read_text(), url, "1", "2", "4"],
        input=f"{key}\n{listeners_source}",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_bench_sends_the_api_key_to_no_squatter_on_an_instance_port(squatter: Squatter) -> None:
    """playbooks/bench.yml measures every instance with the servers' key: a stopped instance's port bound by a local
    account gets no request with it, and the bench stops naming the port's holder."""
    done = run_bench_client(squatter.url, KEY)
    assert done.returncode != 0
    assert f"{squatter.url}: no request sent with the API key: " in done.stderr
    assert f"port {squatter.port} is held by PID {squatter.pid} (python" in done.stderr, done.stderr
    assert KEY not in done.stderr + done.stdout
    assert squatter.headers() == [], "the squatter received a request with the key"


def test_the_bench_without_a_key_measures_anything_that_answers(squatter: Squatter) -> None:
    """No key, nothing to protect: the squatter (whose answers carry no tokens) is asked, its failures counted."""
    done = run_bench_client(squatter.url, "")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["failed"] == 2
    assert squatter.headers() == [None, None, None]  # two requests, then /server_info


def test_the_bench_sends_the_api_key_to_its_instance(monkeypatch: pytest.MonkeyPatch, squatter: Squatter) -> None:
    """The same process, as the instance's unit, gets the key."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_client", BENCH_CLIENT)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    real = listeners.unit_of
    unit = f"sglang-{squatter.port}.service"
    monkeypatch.setattr(listeners, "unit_of", lambda pid, proc="/proc": unit if pid == squatter.pid else real(pid))
    monkeypatch.setattr(bench, "listeners", listeners)
    assert bench.call(squatter.url, "/server_info", None, KEY) == {"workers": [], "version": "0.5.23"}
    assert squatter.headers() == [f"Bearer {KEY}"]


def test_a_gateway_asks_another_hosts_worker_ready_without_the_key(monkeypatch: pytest.MonkeyPatch, squatter: Squatter) -> None:
    """Issue 38, finding 8: the gateway host's members module probes every worker's /health_generate before it registers
    it; another host's worker over plain HTTP is asked without the key (it needs none there), never with it."""
    monkeypatch.setattr(listeners, "is_local", lambda host: False)
    assert members.worker_ready(squatter.url, "/health_generate", api_key=KEY) is None
    assert squatter.headers() == [None]
