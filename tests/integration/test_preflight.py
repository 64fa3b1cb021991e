"""Preflight refuses each bad inventory of the corpus before any host is touched.

Each case's variables are deployed over the sandbox inventory, and the case asserts the failure names what is wrong,
and that no unit or environment file changed and no instance restarted, on any host. Cases that set different
variables share a deploy (batched): a deploy costs about the same for one case as for three, and preflight reports
every problem of every host at once.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet import SANDBOX_HOSTS, STANDIN_PYTHON, Run, file_digests, on_host, overlay_inventory, run_playbook, unit_starts

CORPUS = yaml.safe_load((Path(__file__).parent / "bad_inventories.yml").read_text())
MODEL = "/srv/models/Qwen3.6-27B"
# Every case's hosts serve the stand-in of production's model (roles/testhost) rather than the sandbox's small one.
STAND_IN_MODEL = {"sglang_model": {}, "sglang_model_path": MODEL}
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
for name in ("preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja"):
    if name not in change.get("remove", []):
        open(f"{target}/{name}", "w").write(open(f"{source}/{name}").read())
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


# How many cases share one deploy on a host. Preflight reports every problem of every host together, so the cases
# of one deploy each find their own message in its report; each deploy costs about as much as a case did alone.
CASES_PER_HOST = 3


def hosts_set(case: dict[str, Any]) -> set[str]:
    """The hosts whose variables the case sets (group variables set them on every host)."""
    return set(SANDBOX_HOSTS) if case.get("group_vars") else set(case.get("host_vars") or {})


def variables_set(case: dict[str, Any]) -> set[tuple[str, str]]:
    """(host, variable) for each variable the case sets."""
    group_vars, host_vars = case.get("group_vars") or {}, case.get("host_vars") or {}
    return {(host, name) for host in hosts_set(case) for name in [*group_vars, *host_vars.get(host, {})]}


def deployed_everywhere(case: dict[str, Any]) -> bool:
    """A case that sets only some hosts' variables deploys to those hosts only (the others would pass preflight and
    add nothing to what the case shows, at the cost of a host's run), unless its host fails preflight outright: the
    gate, run by the hosts that remain, is what reports that one."""
    return bool(case.get("group_vars") or not case.get("host_vars") or fails_preflight_outright(case))


def fails_preflight_outright(case: dict[str, Any]) -> bool:
    """Whether the case's host stops preflight (its message is the gate's, reported by the other hosts)."""
    return any(PREFLIGHT_FAILED in e for e in case["expect"])


def batched(cases: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The cases in deploys that set each variable once, with at most CASES_PER_HOST cases per host; a case whose
    host fails preflight outright (its message is the gate's) deploys alone."""
    batches: list[list[dict[str, Any]]] = []
    for case in cases:
        fits = (
            batch
            for batch in batches
            if not any(fails_preflight_outright(other) for other in [*batch, case])
            and not any(variables_set(case) & variables_set(other) for other in batch)
            and all(sum(host in hosts_set(other) for other in batch) < CASES_PER_HOST for host in hosts_set(case))
        )
        batch = next(fits, None)
        if batch is None:
            batches.append([case])
        else:
            batch.append(case)
    return batches


def refuse(cases: list[dict[str, Any]], directory: Path) -> Run:
    """Deploys the cases' variables merged over the sandbox inventory, whose hosts serve production's model here: the
    stand-in of Qwen3.6-27B (STAND_IN_MODEL), at its real sizes, for the memory and shard checks."""
    host_vars: dict[str, dict[str, Any]] = {host: dict(STAND_IN_MODEL) for host in SANDBOX_HOSTS}
    group_vars: dict[str, Any] = {}
    for case in cases:
        for host, variables in (case.get("host_vars") or {}).items():
            host_vars[host].update(variables)
        group_vars.update(case.get("group_vars") or {})
    inventory = overlay_inventory(directory, host_vars=host_vars, group_vars=group_vars)
    hosts = set().union(*(hosts_set(case) for case in cases))
    everywhere = any(deployed_everywhere(case) for case in cases)
    return run_playbook("deploy.yml", inventory=inventory, limit=None if everywhere else ",".join(sorted(hosts)))


def reports(run: Run, case: dict[str, Any]) -> bool:
    report = "\n".join(run.failure_messages())
    return all(fragment in report for fragment in case["expect"])


@pytest.fixture(scope="module")
def refused(sandbox: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Run], bool]]:
    """Every corpus case deployed, in batches (batched), four deploys at a time, inside all the cases' setups; and
    whether the fleet (unit and environment files, instance start times) was the same before and after all of them.

    None may change anything, and each asserts only its own message. A case whose message is not in its batch's
    report (another case's problem on the same host stopped the check that finds it) is deployed again, with at most
    one such case of the other host, and judged by that run.
    """
    before = fleet_state()
    batches = batched(CORPUS)
    runs: dict[str, Run] = {}
    again: dict[Future[Run], list[dict[str, Any]]] = {}
    waiting: dict[str, list[dict[str, Any]]] = {}  # by host: hidden cases of that host alone, until the other's come

    def deploy_again(cases: list[dict[str, Any]]) -> None:
        again[pool.submit(refuse, cases, tmp_path_factory.mktemp("again"))] = cases

    with contextlib.ExitStack() as setups:
        for name in sorted({case["setup"] for case in CORPUS if case.get("setup")}):
            setups.enter_context(SETUPS[name]())
        with ThreadPoolExecutor(max_workers=4) as pool:
            deploys = {pool.submit(refuse, batch, tmp_path_factory.mktemp("batch")): batch for batch in batches}
            for done in as_completed(deploys):
                for case in deploys[done]:
                    runs[case["id"]] = done.result()
                    if reports(done.result(), case):
                        continue
                    if len(hosts_set(case)) != 1 or deployed_everywhere(case):
                        deploy_again([case])
                        continue
                    [host] = hosts_set(case)
                    partner = next((other for other in waiting if other != host and waiting[other]), None)
                    if partner is None:
                        waiting.setdefault(host, []).append(case)
                    else:
                        deploy_again([waiting[partner].pop(0), case])
            for cases in waiting.values():
                for case in cases:
                    deploy_again([case])
            for done, cases in again.items():
                runs.update({case["id"]: done.result() for case in cases})
    hidden = sorted(case["id"] for cases in again.values() for case in cases)
    print(f"{len(CORPUS)} cases in {len(batches)} deploys, and {len(hidden)} in {len(again)} more: {hidden}")
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
