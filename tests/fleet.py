"""Driving the fleet's playbooks from tests and benchmarks: ansible-runner, read through its events."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

ROOT = Path(__file__).resolve().parent.parent
SANDBOX_INVENTORY = ROOT / "inventory/sandbox"
# The sandbox test hosts; each is a container of the same name.
SANDBOX_HOSTS = ("ct129", "b200")
# The Python of the stand-in nvidia-smi on test hosts, with the simulator (and its gpu_hog) importable.
STANDIN_PYTHON = "/opt/sglang-simulator-standin/bin/python"


def fresh_python(script: str, *args: str, options: tuple[str, ...] = ()) -> Any:
    """What `script` prints as JSON, run with `args` in a fresh interpreter (a run's own process) with Python's
    `options`, from the checkout's root; it must exit 0."""
    run = subprocess.run([sys.executable, *options, "-c", script, *args], capture_output=True, text=True, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def local_play(play: Path, environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`play` run by ansible-playbook on this machine (local connection, this Python), with no ansible.cfg but this
    checkout's collection, from the play's folder; `environment` added to this process's."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        capture_output=True, text=True, check=False, cwd=play.parent,
        env={**os.environ, "ANSIBLE_CONFIG": str(play.parent / "none.cfg"),
             "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), **(environment or {})},
    )  # fmt: skip


@dataclass
class Run:
    """One playbook run: its exit code and every event ansible-runner recorded."""

    rc: int
    status: str
    events: list[dict[str, Any]]

    def results(self, kind: str = "runner_on_ok") -> list[dict[str, Any]]:
        return [e["event_data"] for e in self.events if e.get("event") == kind]

    def changed(self) -> list[tuple[str, str, str]]:
        """(host, task, item label) of every change, loop items one by one."""
        found = []
        for data in self.results("runner_on_ok") + self.results("runner_item_on_ok"):
            result = data.get("res", {})
            if result.get("changed") and not result.get("results"):
                label = result.get("_ansible_item_label") or result.get("name", "")
                found.append((data["host"], data["task"], str(label)))
        return found

    def changed_count(self) -> int:
        stats = [e["event_data"] for e in self.events if e.get("event") == "playbook_on_stats"]
        return sum(stats[-1].get("changed", {}).values()) if stats else 0

    def failure_messages(self) -> list[str]:
        messages: list[str] = []
        for data in self.results("runner_on_failed") + self.results("runner_on_unreachable"):
            message = data.get("res", {}).get("msg", "")
            messages.extend(message if isinstance(message, list) else str(message).splitlines())
        return messages


def collection_filters(filter_module: type) -> dict[str, Callable[..., Any]]:
    """A filter plugin's filters under the names templates use: sglang.fleet.<name>."""
    return {f"sglang.fleet.{name}": function for name, function in filter_module().filters().items()}


def run_playbook(
    playbook: str,
    inventory: Path = SANDBOX_INVENTORY,
    extravars: dict[str, Any] | None = None,
    limit: str | None = None,
    tags: str | None = None,
    cmdline: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    envvars: dict[str, str] | None = None,
) -> Run:
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-runner-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(ROOT),
            playbook=str(ROOT / playbook),
            inventory=str(inventory),
            extravars=extravars or {},
            limit=limit,
            tags=tags,
            cmdline=cmdline,
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **(envvars or {})},
            quiet=True,
            event_handler=(lambda event: on_event(event) or True) if on_event else None,
        )
        return Run(rc=int(runner.rc), status=str(runner.status), events=list(runner.events))


def run_module(module: str, pattern: str = "sglang_servers", inventory: Path = SANDBOX_INVENTORY) -> Run:
    """An ad-hoc module run (`ansible <pattern> -m <module>`)."""
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-runner-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(ROOT),
            module=module,
            host_pattern=pattern,
            inventory=str(inventory),
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
            quiet=True,
        )
        return Run(rc=int(runner.rc), status=str(runner.status), events=list(runner.events))


def overlay_inventory(
    directory: Path, host_vars: dict[str, dict[str, Any]] | None = None, group_vars: dict[str, Any] | None = None
) -> Path:
    """A copy of the sandbox inventory (links resolved) with variables merged over its files."""
    target = directory / "inventory"
    shutil.copytree(SANDBOX_INVENTORY, target, symlinks=False)
    for host, variables in (host_vars or {}).items():
        path = target / "host_vars" / f"{host}.yml"
        merged = {**(yaml.safe_load(path.read_text()) or {}), **variables}
        path.write_text(yaml.safe_dump(merged, sort_keys=False))
    if group_vars:
        path = target / "group_vars" / "all.yml"
        merged = {**(yaml.safe_load(path.read_text()) or {}), **group_vars}
        path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return target


def on_host(host: str, *command: str) -> str:
    """Runs a command inside a sandbox host and returns its stdout."""
    return subprocess.run(["docker", "exec", host, *command], capture_output=True, text=True, check=True).stdout


# Where on_host_with_router_client copies the collection's module_utils on a sandbox host.
CLIENT_PATH = "/tmp/sglang-fleet-router-client"


def install_router_launcher(directory: Path) -> Path:
    """The router's launcher as role sglang_router installs it: with the collection's listeners.py beside it, under the
    names its settings give them (filter sglang_router_settings's `launcher_files`; the launcher carries no copy of that
    check); the launcher's path."""
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import sglang_router_settings

    settings = sglang_router_settings("h", {"host": "127.0.0.1", "port": 1, "gateway_host": "127.0.0.1", "gateway_port": 2,
                                            "service": {"helper_dir": "/h"}})  # fmt: skip
    [launcher, listeners] = settings["launcher_files"]
    assert (launcher["dest"], listeners["dest"]) == (settings["launcher"], settings["listeners"])
    directory.mkdir(parents=True, exist_ok=True)
    installed = directory / Path(launcher["dest"]).name
    shutil.copy(ROOT / "roles/sglang_router/files" / launcher["src"], installed)
    shutil.copy(ROOT / "plugins/module_utils" / listeners["module_utils"], directory / Path(listeners["dest"]).name)
    return installed


def on_host_with_router_client(host: str, code: str) -> str:
    """Runs `code` inside a sandbox host after `from <the collection's sglang_router_client> import *`, with the
    module_utils it imports (listeners, safe_write) beside it, as a module's payload carries them; returns its stdout.
    Its keyed requests go through the same key-holder check as the modules' (run as root, which can read /proc)."""
    package = f"{CLIENT_PATH}/ansible_collections/sglang/fleet/plugins"
    on_host(host, "rm", "-rf", CLIENT_PATH)
    on_host(host, "mkdir", "-p", package)
    # Through tar, not docker cp: /tmp on a test host is systemd's tmpfs, which docker cp does not see.
    packed = subprocess.run(
        ["tar", "-C", str(ROOT / "plugins"), "--exclude=__pycache__", "-c", "module_utils"], capture_output=True, check=True
    ).stdout
    subprocess.run(["docker", "exec", "-i", host, "tar", "-x", "-C", package], input=packed, check=True)
    script = "from ansible_collections.sglang.fleet.plugins.module_utils.sglang_router_client import *\n" + code
    return subprocess.run(
        ["docker", "exec", "-e", f"PYTHONPATH={CLIENT_PATH}", host, "python3", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def unit_starts(host: str) -> dict[str, str]:
    """When each SGLang instance's unit on the host last entered 'active' (changes on every restart)."""
    units = on_host(host, "systemctl", "list-units", "--plain", "--no-legend", "--all", "sglang-*.service").split()
    names = [word for word in units if re.fullmatch(r"sglang-\d+\.service", word)]
    starts = {}
    for name in names:
        starts[name] = on_host(host, "systemctl", "show", "--property=ActiveEnterTimestampMonotonic", "--value", name).strip()
    return starts


def file_digests(host: str, pattern: str = "/etc/systemd/system/sglang-*.service /etc/sglang-fleet/*.env") -> str:
    return on_host(host, "sh", "-c", f"sha256sum {pattern} 2>/dev/null || true")


def http_status(host: str, url: str, ca_file: str = "") -> int:
    """HTTP status of a GET made inside the host (0 when nothing answers); an https URL verified against `ca_file` on
    the host (by default the instances' CA, SERVER_CA)."""
    script = (
        "import ssl, sys, urllib.request, urllib.error\n"
        "tls = ssl.create_default_context(cafile=sys.argv[2]) if sys.argv[1].startswith('https:') else None\n"
        "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=30, context=tls).status)\n"
        "except urllib.error.HTTPError as error:\n    print(error.code)\n"
        "except OSError:\n    print(0)\n"
    )
    return int(on_host(host, "python3", "-c", script, url, ca_file or SERVER_CA).strip())


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether `condition()` holds within `seconds`, asked once a second."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(1)
    return condition()


def unit_property(host: str, unit: str, name: str) -> str:
    return on_host(host, "systemctl", "show", f"--property={name}", "--value", unit).strip()


LOAD_CLIENT = Path(__file__).resolve().parent / "integration/load_client.py"
# The sandbox's throw-away test CA and the fleet gateway's certificate (inventory/sandbox-on-network.yml names them),
# made at run time by scripts/test_ca.py (`make sandbox-prometheus` too), and the CA as every sandbox host keeps it.
SANDBOX_TLS = ROOT / "build/sandbox-tls"
SANDBOX_CA = "/usr/local/lib/sglang-fleet/gateway-ca.pem"
# The same test CA as the instances' CA where they serve https (sglang_server_tls_ca; role sglang_server puts it there).
SERVER_CA = "/usr/local/lib/sglang-fleet/server-ca.pem"


def sandbox_test_ca(*addresses: str) -> Path:
    """The sandbox's test CA and the gateway's certificate (for ct129, b200 and loopback, and `addresses`: the hosts'
    IP addresses, which the gateways' mesh dials), made once, kept while valid and naming them all."""
    names = ["ct129", "b200", "127.0.0.1", "localhost", *addresses]
    subprocess.run([sys.executable, str(ROOT / "scripts/test_ca.py"), str(SANDBOX_TLS), *names], check=True)
    return SANDBOX_TLS


def router_key() -> str:
    """The key b200's router wants on /workers: its admin key where it has one, else the clients' key, else none."""
    text = on_host("b200", "sh", "-c", "cat /etc/sglang-router/router.json 2>/dev/null || true").strip()
    keys = json.loads(text) if text else {}
    return str(keys.get("admin_key") or keys.get("api_key") or "")


def router_worker_urls(healthy: bool = False) -> list[str]:
    """The workers b200's router lists (only those it lists as healthy, with `healthy`), asked on the host."""
    listing = f"\nimport json\nprint(json.dumps(list_workers('http://127.0.0.1:30100', api_key={router_key()!r})))\n"
    workers = json.loads(on_host_with_router_client("b200", listing))
    return sorted(str(w["url"]) for w in workers if w.get("is_healthy") is True or not healthy)


@contextlib.contextmanager
def load_through_router(
    router: str = "http://127.0.0.1:30100",
    clients: int = 4,
    host: str = "b200",
    keys_file: str = "/etc/sglang-router/router.json",
    model: str = "",
) -> Iterator[dict[str, Any]]:
    """Bounded load through a host's router (or the fleet gateway, with its keys file; naming `model` where the router
    routes by model) while the block runs
    (tests/integration/load_client.py, inside the host); afterwards the dict holds its report: requests, failed,
    errors, fewest and most workers in rotation."""
    on_host(host, "rm", "-f", "/tmp/stop-load")
    load = subprocess.Popen(
        ["docker", "exec", "-i", host, "python3", "-", router, "900", str(clients), keys_file, model, SANDBOX_CA],
        stdin=LOAD_CLIENT.open("rb"),
        stdout=subprocess.PIPE,
        text=True,
    )
    report: dict[str, Any] = {}
    try:
        yield report
    finally:
        on_host(host, "touch", "/tmp/stop-load")
        output, _ = load.communicate(timeout=120)
        report.update(json.loads(output.strip().splitlines()[-1]))


# The fleet gateway of inventory/sandbox-on-network.yml (over https, with the sandbox's test CA) as its own host
# reaches it, and its keys file there; inventory/sandbox-span's gateway serves plain http on span0's loopback.
GATEWAY = "https://127.0.0.1:30200"
SPAN_GATEWAY = "http://127.0.0.1:30200"
GATEWAY_KEYS = "/etc/sglang-router/gateway.json"


def registered_workers(host: str = "ct129", url: str = GATEWAY, keys_file: str = GATEWAY_KEYS) -> dict[str, tuple[str, bool]]:
    """A router's workers (URL -> the model it routes to them, healthy), listed with its admin key inside its host (by
    default ct129's gateway); none while it does not answer (starting)."""
    script = (
        "import json, ssl, sys, urllib.request\n"
        "key = json.load(open(sys.argv[2]))['admin_key']\n"
        "request = urllib.request.Request(sys.argv[1] + '/workers', headers={'Authorization': 'Bearer ' + key})\n"
        "tls = ssl.create_default_context(cafile=sys.argv[3]) if sys.argv[1].startswith('https:') else None\n"
        "try:\n    workers = json.load(urllib.request.urlopen(request, timeout=30, context=tls))['workers']\n"
        "except OSError:\n    workers = []\n"
        "print(json.dumps({worker['url']: [worker['model_id'], worker['is_healthy']] for worker in workers}))\n"
    )
    listed = json.loads(on_host(host, "python3", "-c", script, url, keys_file, SANDBOX_CA))
    return {url: (model, healthy) for url, (model, healthy) in listed.items()}


def chat_requests(host: str, port: int) -> float:
    """The chat completions an instance answered (its sglang:http_requests_total), read inside its host: over https,
    verified with the instances' CA, where deploy installed one (inventory/sandbox-on-network.yml)."""
    script = (
        "import os, ssl, sys, urllib.request\n"
        "tls = os.path.exists(sys.argv[2])\n"
        "url = ('https' if tls else 'http') + '://127.0.0.1:' + sys.argv[1] + '/metrics'\n"
        "context = ssl.create_default_context(cafile=sys.argv[2]) if tls else None\n"
        "print(urllib.request.urlopen(url, context=context).read().decode())\n"
    )
    text = on_host(host, "python3", "-c", script, str(port), SERVER_CA)
    series = 'sglang:http_requests_total{endpoint="/v1/chat/completions",method="POST"} '
    return sum(float(line[len(series) :]) for line in text.splitlines() if line.startswith(series))


def changed_diffs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The diffs of the changed tasks among `results` (each a task's result): a task's diff is a list of file diffs, or
    one dict (the rollout's check-mode lines: {"prepared": "<instance>: restart\\n"})."""
    found = [res.get("diff") or [] for res in results if res.get("changed")]
    return [diff for each in found for diff in ([each] if isinstance(each, dict) else each)]


def router_settings(host: str = "ct129", **variables: Any) -> dict[str, Any]:
    """Role sglang_router's `_sglang_router_settings` on `host`, as its preflight's first task renders it (the task's own
    expression, filter sglang_router_settings) from the role's defaults (its generated admin keys aside) and
    `variables` (with the server role's sglang_service, sglang_advertise_host and sglang_api_key unless given)."""
    from ansible.plugins.filter.core import FilterModule as CoreFilters
    from ansible_collections.sglang.fleet.plugins.filter.sglang_router_settings import FilterModule as SettingsFilters
    from jinja2.nativetypes import NativeEnvironment

    environment = NativeEnvironment()
    environment.filters.update({**CoreFilters().filters(), **collection_filters(SettingsFilters)})
    role = ROOT / "roles/sglang_router"
    context: dict[str, Any] = {
        "inventory_hostname": host,
        "groups": {},
        "sglang_router_admin_key": "",
        "sglang_gateway_admin_key": "",
        "sglang_service": {"helper_dir": "/usr/local/lib/sglang-fleet", "secrets_dir": "/etc/sglang-fleet/secrets",
                           "home": "/var/lib/sglang", "user": "sglang", "group": "sglang"},
        "sglang_advertise_host": "10.0.0.2",
        "sglang_api_key": "",
        **yaml.safe_load((role / "vars/main.yml").read_text()),
    }  # fmt: skip
    defaults = {name: value for name, value in yaml.safe_load((role / "defaults/main.yml").read_text()).items()
                if name not in context}  # fmt: skip
    context.update(variables)
    for name, value in defaults.items():
        if name not in variables:
            context[name] = environment.from_string(value).render(**context) if isinstance(value, str) else value
    [expression] = [step["ansible.builtin.set_fact"]["_sglang_router_settings"]
                    for step in yaml.safe_load((role / "tasks/preflight.yml").read_text())
                    if "_sglang_router_settings" in (step.get("ansible.builtin.set_fact") or {})]  # fmt: skip
    # A native environment renders the filter's dict itself (jinja2's stubs type render() as str).
    rendered: Any = environment.from_string(expression).render(**context)
    return dict(rendered)


def pem_files(folder: Path, *names: str) -> list[str]:
    """PEM files on the control node (the TLS filters check they are files there), by their absolute paths."""
    for name in names:
        (folder / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return [str(folder / name) for name in names]
