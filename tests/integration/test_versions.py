"""SGLang versions per host: ct129 moves to 0.5.17 (the simulator in 0.5.17 mode) and back to 0.5.23."""

from __future__ import annotations

import json
from pathlib import Path

from fleet import Run, on_host, overlay_inventory, run_playbook


def served_version(host: str, port: int) -> str:
    script = (
        f"import json, urllib.request; print(json.load(urllib.request.urlopen('http://127.0.0.1:{port}/server_info'))['version'])"
    )
    return on_host(host, "python3", "-c", script).strip()


def test_a_host_moves_to_0_5_17_and_back(sandbox: Run, tmp_path: Path) -> None:
    inventory = overlay_inventory(tmp_path, host_vars={"ct129": {"sglang_version": "0.5.17"}})
    try:
        checked = run_playbook("deploy.yml", inventory=inventory, limit="ct129", tags="preflight")
        assert checked.rc == 0, checked.failure_messages()
        moved = run_playbook("deploy.yml", inventory=inventory, limit="ct129")
        assert moved.rc == 0, moved.failure_messages()
        assert served_version("ct129", 30000) == "0.5.17"
        assert "/opt/sglang/simulator-0.5.17/bin/python" in on_host("ct129", "systemctl", "cat", "sglang-30000.service")
        rolled = [data["res"] for data in moved.results() if data["task"].startswith("Roll the changed running")]
        assert rolled and list(rolled[0]["restarted"]) == ["sglang-30000"], json.dumps(rolled)[:2000]
    finally:
        back = run_playbook("deploy.yml", limit="ct129")
        on_host("ct129", "rm", "-rf", "/opt/sglang/simulator-0.5.17")
    assert back.rc == 0, back.failure_messages()
    assert served_version("ct129", 30000) == "0.5.23"
