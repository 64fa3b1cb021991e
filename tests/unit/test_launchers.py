"""The launchers the units start their programs with: keys stay out of the journal (servers), and out of the command
line and the environment (router)."""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest
from fleet import ROOT, install_router_launcher
from simulator.simkit import SRC, Env, free_port, make_model, write_gpus

SERVER_LAUNCHER = ROOT / "roles/sglang_server/files/sglang_launcher.py"
# The router launcher as the role installs it, its listeners.py beside it.
ROUTER_LAUNCHER = install_router_launcher(Path(tempfile.mkdtemp(prefix="router-helpers-")))
KEY = "sk-fleet-client-0123456789"
ADMIN_KEY = "FleetAdmin0123456789abcdefghijklmnopqrst"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean_environment(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "PYTHON"))}, **extra}


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', port=30003)", "api_key='<redacted>', port=30003)"),
        (f"server_args={{'api_key': '{KEY}', 'admin_api_key': '{ADMIN_KEY}'}}", "'admin_api_key': '<redacted>'}"),
        (f'{{"api_key": "{KEY}", "port": 30003}}', '"api_key": \'<redacted>\', "port": 30003}'),
        (f"ServerArgs(admin_api_key='{ADMIN_KEY}', api_key=\"it's {KEY}\")", "api_key='<redacted>')"),
        (f"launch_command='python -m sglang.launch_server --api-key {KEY} --port 30003'", "--api-key <redacted> --port 30003'"),
        (f"argv: --admin-api-key={ADMIN_KEY} --api-key={KEY}", "--admin-api-key=<redacted> --api-key=<redacted>"),
        (f"config: {{'api-key': '{KEY}'}}", "{'api-key': '<redacted>'}"),
    ],
)
def test_the_server_launcher_redacts_every_key_value(line: str, shown: str) -> None:
    redacted = load(SERVER_LAUNCHER).redact(line)
    assert KEY not in redacted and ADMIN_KEY not in redacted
    assert redacted.endswith(shown)


def test_the_server_launcher_leaves_other_text_alone() -> None:
    text = "server_args={'api_key': None, 'model_path': '/m', 'watermark_key': '<redacted>'} api_key_file=x"
    assert load(SERVER_LAUNCHER).redact(text) == text


FAKE_SGLANG = f"""
import json, logging, sys
# SGLang sets up its own handlers after start; the launcher's redaction must survive that.
logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", force=True)
logger = logging.getLogger("sglang.srt.entrypoints.engine")
logger.info(f"server_args={{dict(model_path='/m', api_key={KEY!r}, admin_api_key={ADMIN_KEY!r}, port=30003)}}")
logging.LoggerAdapter(logging.getLogger("uvicorn"), {{}}).info("ServerArgs(api_key=%r)", {KEY!r})
try:
    raise ValueError("api_key={KEY!r} refused")
except ValueError:
    logger.exception("start failed")
print(json.dumps({{"name": __name__, "argv": sys.argv}}))
"""


def test_the_server_launcher_runs_the_module_as_main_with_the_same_argv_and_no_key_in_its_log(tmp_path: Path) -> None:
    package = tmp_path / "fakesglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_SGLANG)
    args = ["--model-path", "/m", "--port", "30003", "--config", "/etc/sglang-fleet/secrets/sglang-30003.yaml"]
    ran = subprocess.run(
        [sys.executable, str(SERVER_LAUNCHER), "fakesglang.launch_server", *args],
        env=clean_environment(PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(ran.stdout) == {"name": "__main__", "argv": [str(package / "launch_server.py"), *args]}
    assert "server_args=" in ran.stderr and "Traceback" in ran.stderr and "start failed" in ran.stderr
    assert ran.stderr.count("<redacted>") >= 4  # the traceback shows the source line too
    assert KEY not in ran.stderr + ran.stdout and ADMIN_KEY not in ran.stderr


def test_the_simulator_started_through_the_launcher_logs_no_key(tmp_path: Path) -> None:
    """The sandbox's runtime logs its settings with the key, as SGLang does; through the launcher they are redacted."""
    gpus = tmp_path / "gpus.json"
    write_gpus(gpus)
    environment = Env(tmp=tmp_path, gpus_file=gpus, state_dir=tmp_path / "state").environ()
    model = make_model(tmp_path / "Qwen3.6-27B")
    args = ["--model-path", str(model), "--api-key", KEY, "--host", "127.0.0.1", "--port", str(free_port())]
    for launcher in ([sys.executable, "-m", "sglang_simulator"], [sys.executable, str(SERVER_LAUNCHER), "sglang_simulator"]):
        log = started_log(launcher + args, environment)
        assert "server_args=" in log
        if launcher[1] == "-m":
            assert KEY in log, "without the launcher the simulator logs the key, as SGLang does"
        else:
            assert KEY not in log and "'api_key': '<redacted>'" in log


def started_log(argv: list[str], environment: dict[str, str], timeout: float = 30.0) -> str:
    """What the server writes to stderr until it logged its settings (then it is stopped)."""
    assert environment["PYTHONPATH"] == str(SRC)
    process = subprocess.Popen(argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines: list[str] = []
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not any("server_args=" in line for line in lines):
            if selector.select(timeout=0.5):
                line = process.stderr.readline()
                if not line:
                    break
                lines.append(line)
    finally:
        process.kill()
        process.wait(timeout=10)
        process.stderr.close()
    return "".join(lines)


def write_keys(path: Path, api_key: str = KEY, admin_key: str = ADMIN_KEY) -> Path:
    path.write_text(json.dumps({"api_key": api_key, "admin_key": admin_key}))
    path.chmod(0o600)
    return path


FAKE_ROUTER = """
import json, os, sys
with open(os.environ["FAKE_ROUTER_REPORT"], "w") as report:
    json.dump({"name": __name__, "argv": sys.argv, "cmdline": open("/proc/self/cmdline").read(),
               "environ": open("/proc/self/environ").read()}, report)
"""


def fake_router(directory: Path, source: str) -> Path:
    """A package `smg` in `directory` whose `launch_router` runs `source`; its module's path."""
    package = directory / "smg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_router.py").write_text(source)
    return package / "launch_router.py"


def test_the_router_launcher_hands_the_keys_over_inside_the_process(tmp_path: Path) -> None:
    module = fake_router(tmp_path, FAKE_ROUTER)
    keys = write_keys(tmp_path / "router.json")
    report = tmp_path / "report.json"
    args = ["--host", "127.0.0.1", "--port", "30100", "--worker-urls", "http://127.0.0.1:30000"]
    subprocess.run(
        [sys.executable, str(ROUTER_LAUNCHER), str(keys), *args],
        env=clean_environment(PYTHONPATH=str(tmp_path), FAKE_ROUTER_REPORT=str(report)),
        check=True,
        timeout=60,
    )
    seen = json.loads(report.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == [
        str(module),
        *args,
        f"--api-key={KEY}",
        f"--control-plane-api-keys=fleet:sglang-fleet:admin:{ADMIN_KEY}",
    ]
    assert KEY not in seen["cmdline"] and ADMIN_KEY not in seen["cmdline"] and str(keys) in seen["cmdline"]
    assert KEY not in seen["environ"] and ADMIN_KEY not in seen["environ"]


def test_the_router_launcher_adds_only_the_keys_it_has(tmp_path: Path) -> None:
    launcher = load(ROUTER_LAUNCHER)
    admin_only = launcher.key_args({"api_key": "", "admin_key": ADMIN_KEY})
    assert admin_only == [f"--control-plane-api-keys=fleet:sglang-fleet:admin:{ADMIN_KEY}"]
    assert launcher.key_args({"api_key": "-starts-with-a-dash", "admin_key": ""}) == ["--api-key=-starts-with-a-dash"]
    assert launcher.key_args({}) == []


def test_the_router_launcher_refuses_a_key_on_the_command_line(tmp_path: Path) -> None:
    launcher = load(ROUTER_LAUNCHER)
    keys = write_keys(tmp_path / "router.json")
    with pytest.raises(SystemExit, match="--api-key belongs in"):
        launcher.main([str(keys), "--port", "30100", "--api-key", KEY], entry_point="nothing_to_run")


# A router that answers /liveness and 202 to POST /workers, until it has the posts it expects; then it reports them.
FAKE_REGISTRY = """
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
posts = []
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/liveness" else 404)
        self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        posts.append({"path": self.path, "authorization": self.headers.get("Authorization"), "body": body})
        self.send_response(202)
        self.end_headers()
    def log_message(self, *args):
        pass
time.sleep(1)  # the launcher's registration asks before this router listens
server = HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler)
if "--tls-cert-path" in sys.argv:  # as smg serves https with these flags (tests/recordings/smg-1.13.0-tls)
    import ssl
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[sys.argv.index("--tls-cert-path") + 1], sys.argv[sys.argv.index("--tls-key-path") + 1])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.timeout = 0.2
deadline = time.monotonic() + 30
while len(posts) < int(os.environ["FAKE_ROUTER_EXPECT"]) and time.monotonic() < deadline:
    server.handle_request()
json.dump(posts, open(os.environ["FAKE_ROUTER_REPORT"], "w"))
"""


def test_a_gateway_registers_the_workers_its_last_deploy_left_once_it_answers(tmp_path: Path) -> None:
    """sglang-router 0.3.2 drops --worker-urls in its multi-model mode: the launcher registers the workers file's
    workers, each with its model, through the registry with the admin key, once the router answers."""
    fake_router(tmp_path, FAKE_REGISTRY)
    keys = write_keys(tmp_path / "gateway.json")
    workers = tmp_path / "gateway-workers.json"
    listed = [{"url": "http://127.0.0.1:30000", "model_id": "tiny"}, {"url": "https://b200:30006", "model_id": "other"}]
    # A workers file a failed switch to https left behind: b200's worker over plain http, where the client key would
    # cross the network in the clear. Not registered.
    plain = {"url": "http://b200:30005", "model_id": "other"}
    workers.write_text(json.dumps({"workers": [*listed, plain]}))
    report = tmp_path / "report.json"
    port = free_port()
    started = subprocess.run(
        [sys.executable, str(ROUTER_LAUNCHER), str(keys), "--host", "0.0.0.0", "--port", str(port), "--enable-igw"],
        env=clean_environment(
            PYTHONPATH=str(tmp_path),
            FAKE_ROUTER_REPORT=str(report),
            FAKE_ROUTER_EXPECT="2",
            SGLANG_FLEET_WORKERS_FILE=str(workers),
            SGLANG_FLEET_ROUTER_URL=f"http://127.0.0.1:{port}",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    posts = json.loads(report.read_text())
    assert posts == [
        {"path": "/workers", "authorization": f"Bearer {ADMIN_KEY}", "body": {**worker, "api_key": KEY}} for worker in listed
    ]
    assert (
        f"registered 2 of 3 worker(s) from {workers}; not registered: http://b200:30005 (not https, nor http to this host"
        in started.stderr
    )


def test_only_a_worker_on_another_host_over_plain_http_is_held_back() -> None:
    launcher = load(ROUTER_LAUNCHER)
    plain = ["http://b200:30000", "http://10.0.0.9:30000", "http://[fd00::9]:30000", "HTTP://b200:30000",
             # Fails closed: no scheme, another scheme, and an address part parsers read differently.
             "b200:30000", "10.0.0.5:30000", "grpc://10.0.0.5:1", "http://evil.example\\@127.0.0.1:30000",
             "http://user@127.0.0.1:30000", "http://127.0.0.1 :30000"]  # fmt: skip
    kept = ["http://127.0.0.1:30000", "http://[::1]:30000", "http://localhost:30000", "https://b200:30000",
            "HTTPS://b200:30000"]  # fmt: skip
    assert [url for url in plain + kept if launcher.key_may_cross_in_clear(url)] == plain


def test_a_gateway_over_tls_registers_its_workers_verified_with_the_fleets_ca(tmp_path: Path) -> None:
    """Issue 38: a gateway over https (--tls-cert-path/--tls-key-path) is asked and sent its admin key only over TLS,
    verified with the CA its unit names (SGLANG_FLEET_CA_FILE)."""
    tls = tmp_path / "tls"
    subprocess.run([sys.executable, str(ROOT / "scripts/test_ca.py"), str(tls), "127.0.0.1"], check=True)
    fake_router(tmp_path, FAKE_REGISTRY)
    keys = write_keys(tmp_path / "gateway.json")
    workers = tmp_path / "gateway-workers.json"
    listed = [{"url": "http://127.0.0.1:30000", "model_id": "tiny"}]
    workers.write_text(json.dumps({"workers": listed}))
    report = tmp_path / "report.json"
    port = free_port()
    tls_flags = ["--tls-cert-path", str(tls / "server.pem"), "--tls-key-path", str(tls / "server.key")]
    started = subprocess.run(
        [sys.executable, str(ROUTER_LAUNCHER), str(keys), "--host", "127.0.0.1", "--port", str(port), *tls_flags],
        env=clean_environment(
            PYTHONPATH=str(tmp_path),
            FAKE_ROUTER_REPORT=str(report),
            FAKE_ROUTER_EXPECT="1",
            SGLANG_FLEET_WORKERS_FILE=str(workers),
            SGLANG_FLEET_ROUTER_URL=f"https://127.0.0.1:{port}",
            SGLANG_FLEET_CA_FILE=str(tls / "ca.pem"),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    posts = json.loads(report.read_text())
    assert posts == [{"path": "/workers", "authorization": f"Bearer {ADMIN_KEY}", "body": {**listed[0], "api_key": KEY}}]
    assert f"registered 1 of 1 worker(s) from {workers}" in started.stderr


def test_a_first_start_has_no_workers_file_and_a_worker_needs_a_url(tmp_path: Path) -> None:
    launcher = load(ROUTER_LAUNCHER)
    workers = tmp_path / "gateway-workers.json"
    assert launcher.read_workers(str(workers)) == []
    workers.write_text(json.dumps({"workers": [{"url": "http://b200:30001"}, {"model_id": "no url"}, "junk"]}))
    assert launcher.read_workers(str(workers)) == [{"url": "http://b200:30001", "model_id": ""}]


def test_a_workers_file_without_the_routers_url_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = load(ROUTER_LAUNCHER)
    monkeypatch.setenv("SGLANG_FLEET_WORKERS_FILE", str(tmp_path / "gateway-workers.json"))
    monkeypatch.delenv("SGLANG_FLEET_ROUTER_URL", raising=False)
    with pytest.raises(SystemExit, match="SGLANG_FLEET_WORKERS_FILE needs SGLANG_FLEET_ROUTER_URL"):
        launcher.main([str(write_keys(tmp_path / "gateway.json")), "--port", "30200"], entry_point="nothing_to_run")
