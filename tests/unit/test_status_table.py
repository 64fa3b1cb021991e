"""playbooks/status.yml's table (plugins/filter/sglang_status.py): every instance, router and gateway, each with the URL
to use from the control node, or where it answers when it listens on loopback, and how to get there."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.fleet.plugins.filter.sglang_status import sglang_status_table


def instance(port: int, remote_url: str = "") -> dict[str, Any]:
    return {
        "name": f"sglang-{port}", "port": port, "url": f"http://127.0.0.1:{port}", "remote_url": remote_url,
        "gpus": "0", "model": "tiny-qwen3.5", "version": "0.5.23", "speculative_algorithm": "NGRAM",
        "accept_length": 2.5, "health": "ready", "uptime_seconds": 3720, "restarts": 0, "exposure": 1.7,
        "active_state": "active", "startup": {"total": 26.35, "weight_load": 0.38, "cuda_graph": 0.0},
    }  # fmt: skip


def router(name: str, port: int, remote_url: str = "") -> dict[str, Any]:
    return {
        "name": name, "url": f"http://127.0.0.1:{port}", "remote_url": remote_url, "health": "ready",
        "uptime_seconds": 60, "restarts": 1, "exposure": 1.5, "active_state": "active",
    }  # fmt: skip


def test_every_instance_router_and_gateway_has_a_row_with_a_url_usable_from_here() -> None:
    hostvars = {
        "b200": {
            "ansible_connection": "ssh",
            "_sglang_server_status": {"instances": [instance(30000, "http://10.0.0.7:30000")]},
            "sglang_router_status": {"routers": [router("router", 30100), router("gateway", 30200, "http://10.0.0.7:30200")]},
        },
        "gone": {},
    }
    lines = sglang_status_table(["b200", "gone"], hostvars)
    assert lines[0].split()[::4] == ["HOST", "MODEL", "HEALTH", "STARTUP"]
    assert lines[0].split()[-1] == "URL"
    rows = [line.split() for line in lines[1:4]]
    assert [(row[1], row[-1]) for row in rows[:1]] == [("sglang-30000", "http://10.0.0.7:30000")]
    assert rows[0][6:10] == ["NGRAM", "2.50", "ready", "1h02m"]
    assert rows[0][12] == "26.4/0.4/0.0", "SGLang's own start-up: total/weight load/CUDA graphs (issue 42)"
    assert rows[1][12] == "-", "a router reports none"
    assert rows[1][:3] == ["b200", "router", "30100"] and lines[2].endswith("http://127.0.0.1:30100 (on b200 only)")
    assert rows[2][:3] == ["b200", "gateway", "30200"] and lines[3].endswith("http://10.0.0.7:30200")
    assert lines[4] == "gone: no status (unreachable, or preflight of the plan failed)"
    assert "ssh -N -L 30100:127.0.0.1:30100 b200" in lines[5]


def test_a_sandbox_host_on_loopback_is_reached_with_docker_exec() -> None:
    status = {"instances": [instance(30000)]}
    hostvars = {"ct129": {"ansible_connection": "community.docker.docker", "_sglang_server_status": status}}
    lines = sglang_status_table(["ct129"], hostvars)
    assert lines[1].endswith("http://127.0.0.1:30000 (on ct129 only)")
    script = (
        "import http.client as h; c = h.HTTPConnection('127.0.0.1', 30000); c.request('GET', '/v1/models'); "
        "print(c.getresponse().read().decode())"
    )
    assert f'docker exec ct129 python3 -c "{script}"' in lines[2]
