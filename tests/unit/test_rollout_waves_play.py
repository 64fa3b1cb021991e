"""roles/sglang_server/tasks/roll_waves.yml run by ansible-playbook on two local hosts, from a handler as the role runs
it: one include per wave, each wave on every host before the next, and a failure on one host halting the later waves
on the others (the module stops there, naming the failure)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import ROOT


def instance(port: int, tmp_path: Path) -> dict[str, Any]:
    files = {"last_good": [[str(tmp_path / f"sglang-{port}.service"), str(tmp_path / f"last-good-{port}.service")]]}
    return {"name": f"sglang-{port}", "unit": f"sglang-{port}.service", "url": f"http://127.0.0.1:{port}",
            "served_model_name": "qwen", "files": files}  # fmt: skip


def run_waves(tmp_path: Path, routers: dict[str, str], check: bool) -> subprocess.CompletedProcess[str]:
    """Both hosts roll their two instances of one model with a budget of 1 (four waves), through a handler that
    includes roll_waves.yml; `routers`: each host's router URL."""
    hosts = {host: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "sglang_router": {"url": url, "admin_key": "", "keys_file": ""}}
             for host, url in routers.items()}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    settings = {"sglang_rollout_max_unavailable": 1, "sglang_rollout_canary_seconds": 0,
                "sglang_rollout_canary_max_regression": 0.2,
                "sglang_server_ready_timeout": 5, "sglang_server_ready_interval": 1, "sglang_server_drain_timeout": 1,
                "sglang_server_probe_tokens": 1, "sglang_server_min_accept_length": 1.0, "sglang_server_journal_lines": 1,
                "sglang_api_key": "", "_sglang_server_rolling": {"to_roll": "{{ sglang_instances }}"},
                "sglang_instances": [instance(30000, tmp_path), instance(30001, tmp_path)]}  # fmt: skip
    play = [{
        "hosts": "all", "gather_facts": False, "vars": settings,
        "tasks": [{"name": "Change", "ansible.builtin.debug": {"msg": "changed"}, "changed_when": True, "notify": "Roll"}],
        "handlers": [{"name": "Roll", "ansible.builtin.include_tasks": str(ROOT / "roles/sglang_server/tasks/roll_waves.yml")}],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "none.cfg").write_text("")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
         *(["--check"] if check else [])],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
             "ANSIBLE_FORKS": "2"},
    )  # fmt: skip


def rolls(output: str) -> list[str]:
    """The wave tasks' results, in order: `<host>: <ok|changed|skipping|fatal>`."""
    found, inside = [], False
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            inside = "Roll this host's instances of the wave" in line
        elif inside and line.split(":", 1)[0] in ("ok", "changed", "skipping", "fatal"):
            found.append(f"{line.split('[', 1)[1].split(']', 1)[0]}: {line.split(':', 1)[0]}")
    return found


def test_the_waves_roll_one_after_another_across_the_hosts(tmp_path: Path) -> None:
    run = run_waves(tmp_path, {"h1": "", "h2": ""}, check=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "wave 1/4: qwen: h1/sglang-30000" in run.stdout and "wave 4/4: qwen: h2/sglang-30001" in run.stdout
    assert [entry for entry in rolls(run.stdout) if not entry.endswith("skipping")] == [
        "h1: changed", "h1: changed", "h2: changed", "h2: changed"
    ]  # fmt: skip
    assert len(rolls(run.stdout)) == 8, "one task per wave, on both hosts"


class Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(500)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def broken_router() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_failure_on_one_host_halts_the_later_waves_on_the_others(tmp_path: Path, broken_router: str) -> None:
    """h1's router is a process that is not ours: its first wave fails before anything restarts; h2's waves (3 and 4)
    do not roll."""
    run = run_waves(tmp_path, {"h1": broken_router, "h2": ""}, check=False)
    assert run.returncode != 0
    assert rolls(run.stdout) == ["h2: skipping", "h1: fatal", "h2: skipping", "h2: fatal"], run.stdout
    # (The module refuses to send a key to a port no router of ours holds: the rollout does not start on h1.)
    assert "Rollout stopped before sglang-30000: h1 failed: Rollout not started: port " in run.stdout
    assert '"not_attempted": ["sglang-30000", "sglang-30001"]' in run.stdout, "h2's waves, both halted"
