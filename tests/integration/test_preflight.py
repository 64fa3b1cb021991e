"""Preflight refuses each bad inventory of the corpus before any host is touched.

Each case deploys an overlay of the sandbox inventory and asserts the failure names what is wrong, and
that no unit or environment file changed and no instance restarted, on any host.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import SANDBOX_HOSTS, STANDIN_PYTHON, Run, file_digests, on_host, overlay_inventory, run_playbook, unit_starts

CORPUS = yaml.safe_load((Path(__file__).parent / "bad_inventories.yml").read_text())
MODEL = "/srv/models/Qwen3.6-27B"
PREFLIGHT_FAILED = "preflight did not complete"
MAKE_MODEL_VARIANT = """
import json, os, sys
source, target, change = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = json.load(open(f"{source}/config.json"))
index = json.load(open(f"{source}/model.safetensors.index.json"))
config.update(change.get("config", {}))
if change.get("drop_mtp"):
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.startswith("mtp.")}
    config["text_config"]["mtp_num_hidden_layers"] = 0
os.makedirs(target, exist_ok=True)
json.dump(config, open(f"{target}/config.json", "w"))
json.dump(index, open(f"{target}/model.safetensors.index.json", "w"))
for shard in sorted(set(index["weight_map"].values())):
    if shard not in change.get("remove", []):
        with open(f"{target}/{shard}", "wb") as handle:
            handle.truncate(change.get("sizes", {}).get(shard, os.path.getsize(f"{source}/{shard}")))
"""


def background(host: str, *command: str) -> None:
    import subprocess

    subprocess.run(["docker", "exec", "--detach", host, *command], check=True)
    time.sleep(1.5)


@contextlib.contextmanager
def model_variant(host: str, name: str, **change: Any) -> Iterator[None]:
    on_host(host, "python3", "-c", MAKE_MODEL_VARIANT, MODEL, f"/srv/models/{name}", json.dumps(change))
    try:
        yield
    finally:
        on_host(host, "rm", "-rf", f"/srv/models/{name}")


@contextlib.contextmanager
def model_at(host: str, target: str, remove: str, *commands: str) -> Iterator[None]:
    """A complete copy of the stand-in model at `target`, then `commands` (sh -c) on the host; `remove` goes after."""
    on_host(host, "python3", "-c", MAKE_MODEL_VARIANT, MODEL, target, "{}")
    try:
        for command in commands:
            on_host(host, "sh", "-c", command)
        yield
    finally:
        on_host(host, "rm", "-rf", remove)


@contextlib.contextmanager
def foreign_process(host: str, pattern: str, *command: str) -> Iterator[None]:
    background(host, *command)
    try:
        yield
    finally:
        on_host(host, "pkill", "-f", pattern)


@contextlib.contextmanager
def driver_version(host: str, version: str) -> Iterator[None]:
    path = "/etc/sglang-simulator/gpus.json"
    original = on_host(host, "cat", path)
    changed = json.dumps({**json.loads(original), "driver_version": version})
    on_host(host, "python3", "-c", f"open({path!r}, 'w').write({changed!r})")
    try:
        yield
    finally:
        on_host(host, "python3", "-c", f"open({path!r}, 'w').write({original!r})")


SETUPS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "foreign_listener_on_32001": lambda: foreign_process(
        "ct129", "http.server 32001", "python3", "-m", "http.server", "32001", "--bind", "127.0.0.1"
    ),
    "foreign_gpu_process_on_b200_gpu_5": lambda: foreign_process(
        "b200", "gpu_hog", STANDIN_PYTHON, "-m", "sglang_simulator.gpu_hog", "--gpus", "5", "--mib", "1024"
    ),
    "model_unknown_architecture": lambda: model_variant(
        "b200", "unknown-architecture", config={"architectures": ["Qwen9ForCausalLM"]}
    ),
    "model_shard_missing": lambda: model_variant("b200", "shard-missing", remove=["model-00004-of-00011.safetensors"]),
    "model_shard_empty": lambda: model_variant("b200", "shard-empty", sizes={"model-00005-of-00011.safetensors": 0}),
    "model_shard_truncated": lambda: model_variant(
        "b200", "shard-truncated", sizes={"model-00003-of-00011.safetensors": 1 << 20}
    ),
    "model_without_mtp": lambda: model_variant("ct129", "without-mtp", drop_mtp=True),
    "driver_550_on_ct129": lambda: driver_version("ct129", "550.163.01"),
    # Readable by root, who runs preflight, but not by the servers' account (ProtectHome=yes; a 0600 shard).
    "model_under_home": lambda: model_at("b200", "/home/preflight-models/Qwen3.6-27B", "/home/preflight-models"),
    "model_shard_unreadable": lambda: model_at(
        "b200",
        "/srv/models/shard-unreadable",
        "/srv/models/shard-unreadable",
        "chmod 0755 /srv/models/shard-unreadable && chmod 0644 /srv/models/shard-unreadable/*"
        " && chmod 0600 /srv/models/shard-unreadable/model-00002-of-00011.safetensors",
    ),
}


def fleet_state() -> dict[str, tuple[str, dict[str, str]]]:
    return {host: (file_digests(host), unit_starts(host)) for host in SANDBOX_HOSTS}


def refuse(case: dict[str, Any], directory: Path) -> Run:
    """Deploys the case's inventory; a case that sets only some hosts' variables deploys to those hosts only
    (the others would pass preflight and add nothing to what the case shows, at the cost of a host's run), unless
    its host fails preflight outright: the gate, run by the hosts that remain, is what reports that one."""
    inventory = overlay_inventory(directory, host_vars=case.get("host_vars"), group_vars=case.get("group_vars"))
    everywhere = case.get("group_vars") or not case.get("host_vars") or any(PREFLIGHT_FAILED in e for e in case["expect"])
    hosts = None if everywhere else ",".join(sorted(case["host_vars"]))
    return run_playbook("deploy.yml", inventory=inventory, limit=hosts)


@pytest.fixture(scope="module")
def refused(sandbox: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Run], bool]]:
    """Every corpus case deployed once, four at a time, each inside its own setup; and whether the fleet
    (unit and environment files, instance start times) was the same before and after all of them.

    Cases run side by side: none may change anything, and each asserts only its own message.
    """
    before = fleet_state()
    with contextlib.ExitStack() as setups:
        for name in sorted({case["setup"] for case in CORPUS if case.get("setup")}):
            setups.enter_context(SETUPS[name]())
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = pool.map(lambda case: refuse(case, tmp_path_factory.mktemp(case["id"])), CORPUS)
            runs = dict(zip([case["id"] for case in CORPUS], results, strict=True))
    yield runs, fleet_state() == before


def test_corpus_is_large_and_named_uniquely() -> None:
    ids = [case["id"] for case in CORPUS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    assert all(case.get("setup") is None or case["setup"] in SETUPS for case in CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case["id"] for case in CORPUS])
def test_bad_inventory_is_refused_before_any_change(refused: tuple[dict[str, Run], bool], case: dict[str, Any]) -> None:
    runs, unchanged = refused
    result = runs[case["id"]]
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    for fragment in case["expect"]:
        assert fragment in report, report
    assert result.changed() == [], result.changed()
    assert unchanged, "a refused deploy changed a unit, an environment file or restarted an instance"


def test_production_settings_pass_preflight(sandbox: Run) -> None:
    result = run_playbook("deploy.yml", tags="preflight")
    assert result.rc == 0, result.failure_messages()
    assert result.changed() == []
