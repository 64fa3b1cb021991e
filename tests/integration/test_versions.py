"""SGLang versions per host: every supported release passes preflight, and ct129 moves to 0.5.17 (the simulator in
0.5.17 mode) and back to 0.5.23."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fleet import Run, on_host, overlay_inventory, run_playbook

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR_PYTHON = "/opt/sglang/simulator-0.5.23/bin/python"
# Every release with a support table and a constraints file (what preflight accepts as sglang_version).
RELEASES = sorted(
    (
        path.name.removeprefix("sglang-").removesuffix(".json")
        for path in (ROOT / "roles/sglang_plan/files").glob("sglang-*.json")
    ),
    key=lambda version: tuple(int(part) for part in version.split(".")),
)


def served_version(host: str, port: int) -> str:
    script = (
        f"import json, urllib.request; print(json.load(urllib.request.urlopen('http://127.0.0.1:{port}/server_info'))['version'])"
    )
    return on_host(host, "python3", "-c", script).strip()


def test_every_release_is_known() -> None:
    assert RELEASES == ["0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    for version in RELEASES:
        assert (ROOT / f"roles/sglang_venv/files/constraints-{version}.txt").is_file(), version


@pytest.fixture(scope="module")
def preflights(sandbox: Run, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Each release's preflight of both sandbox hosts, four runs at a time (as test_preflight's corpus): a run with
    --tags preflight installs and writes nothing, so the runs, each with its own inventory, cannot see each other."""

    def preflight(version: str) -> Run:
        inventory = overlay_inventory(tmp_path_factory.mktemp("release"), group_vars={"sglang_version": version})
        return run_playbook("deploy.yml", inventory=inventory, tags="preflight")

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(RELEASES, pool.map(preflight, RELEASES), strict=True))


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_passes_preflight(preflights: dict[str, Run], version: str) -> None:
    """Both sandbox hosts' settings pass preflight against the release's own table (--tags preflight installs
    nothing), and the hosts' simulator stands in for that release when asked to (SGLANG_SIM_VERSION, as the deploy
    sets it from sglang_version)."""
    checked = preflights[version]
    assert checked.rc == 0, checked.failure_messages()
    plans = {data["host"]: data["res"]["plan"] for data in checked.results() if data["task"].startswith("Gather GPUs")}
    assert sorted(plans) == ["b200", "ct129"]
    assert all(plan["problems"] == [] and plan["instances"] for plan in plans.values()), plans
    script = "from sglang_simulator.facts import load_facts, release; print(load_facts(release()).sglang_version)"
    stands_in = on_host("ct129", "env", f"SGLANG_SIM_VERSION={version}", SIMULATOR_PYTHON, "-c", script)
    assert stands_in.strip() == version


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
