"""What `deploy.yml` leaves on each test host: units, environment, listening ports and readiness."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")
EXPECTED = {
    "ct129": {30000: {"gpus": "0,1", "tp": "2", "algorithm": "NEXTN", "steps": "1", "draft": "2"}},
    "b200": {30000 + i: {"gpus": str(i), "tp": "1", "algorithm": "EAGLE", "steps": "3", "draft": "4"} for i in range(7)},
}


def main_process(host: Any, unit: str) -> tuple[list[str], dict[str, str]]:
    pid = host.check_output(f"systemctl show --property=MainPID --value {unit}")
    argv = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")
    environment = dict(entry.split("=", 1) for entry in host.run(f"cat /proc/{pid}/environ").stdout.split("\0") if "=" in entry)
    return argv, environment


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def http_get(host: Any, url: str) -> tuple[int, str]:
    script = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n r = urllib.request.urlopen(sys.argv[1], timeout=30); print(r.status); print(r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n print(e.code)\n"
    )
    out = host.check_output(f"python3 -c {shlex.quote(script)} {url}")
    status, _, body = out.partition("\n")
    return int(status), body


def test_one_active_enabled_unit_per_instance(host: Any) -> None:
    machine, name = host, host.backend.get_hostname()
    units = machine.check_output("systemctl list-units --plain --no-legend 'sglang-[0-9]*.service'").splitlines()
    assert sorted(line.split()[0] for line in units) == [f"sglang-{port}.service" for port in sorted(EXPECTED[name])]
    router = machine.service("sglang-router")
    assert router.is_running == (name == "b200"), "b200 runs its router; ct129 has none"
    for port in EXPECTED[name]:
        service = machine.service(f"sglang-{port}")
        assert service.is_running and service.is_enabled


def test_each_server_has_its_gpus_port_and_speculative_flags(host: Any) -> None:
    machine, name = host, host.backend.get_hostname()
    rows = machine.check_output("nvidia-smi --query-gpu=index,uuid --format=csv,noheader").splitlines()
    uuids = {index.strip(): uuid.strip() for index, uuid in (row.split(",") for row in rows)}
    for port, expected in EXPECTED[name].items():
        argv, environment = main_process(machine, f"sglang-{port}.service")
        assert environment["CUDA_VISIBLE_DEVICES"] == ",".join(uuids[gpu] for gpu in expected["gpus"].split(","))
        assert flag(argv, "--port") == str(port)
        assert flag(argv, "--nccl-port") == str(port + 1000)
        assert flag(argv, "--tp-size") == expected["tp"]
        assert flag(argv, "--speculative-algorithm") == expected["algorithm"]
        assert flag(argv, "--speculative-num-steps") == expected["steps"]
        assert flag(argv, "--speculative-eagle-topk") == "1"
        assert flag(argv, "--speculative-num-draft-tokens") == expected["draft"]
        assert machine.socket(f"tcp://127.0.0.1:{port}").is_listening
        assert (
            machine.process.get(pid=int(machine.check_output(f"systemctl show -p MainPID --value sglang-{port}"))).user
            == "sglang"
        )


def test_every_instance_is_ready_and_serves_its_speculative_settings(host: Any) -> None:
    machine, name = host, host.backend.get_hostname()
    for port, expected in EXPECTED[name].items():
        status, _ = http_get(machine, f"http://127.0.0.1:{port}/health_generate")
        assert status == 200
        status, body = http_get(machine, f"http://127.0.0.1:{port}/server_info")
        info = json.loads(body)
        assert info["speculative_algorithm"] == "EAGLE"  # NEXTN is reported as EAGLE
        assert str(info["speculative_num_draft_tokens"]) == expected["draft"]


def test_environment_files_are_private_to_the_service_group(host: Any) -> None:
    machine, name = host, host.backend.get_hostname()
    for port in EXPECTED[name]:
        env_file = machine.file(f"/etc/sglang-fleet/sglang-{port}.env")
        assert env_file.mode == 0o640 and env_file.user == "root" and env_file.group == "sglang"
        assert "CUDA_HOME=/usr/local/cuda" in env_file.content_string
