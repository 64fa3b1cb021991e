"""Preflight refuses each bad inventory of the corpus before any host is touched.

Each case's variables are deployed over the sandbox inventory, and the case asserts the failure names what is wrong,
and that no unit or environment file changed and no instance restarted, on any host. Cases share a deploy (batched)
when neither's problem can hide or change the other's message: they set different variables, neither sets what the
other's message reads (`reads`), neither stops the checks of a host the other needs (`stops`), and no fragment of one
is part of the other's. A deploy costs about the same for one case as for four, and preflight reports every problem of
every host at once; a case is judged only by report lines that hold no other case's fragment.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
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
GATE_STOPS_EVERY_HOST = "Say why every host stops"
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
not_copied = {"config.json", "model.safetensors.index.json", *change.get("remove", [])}
for name in sorted(os.listdir(source)):  # the processors and the chat template, as the stand-in has them
    if not name.endswith(".safetensors") and name not in not_copied:
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


# A setup runs on one host (its cases' host): name -> (host, the condition made there, undone after the corpus).
Setup = Callable[[str], contextlib.AbstractContextManager[None]]
SETUPS: dict[str, tuple[str, Setup]] = {
    "foreign_listener_on_32001": (
        "ct129",
        lambda host: foreign_process(host, "http.server 32001", "python3", "-m", "http.server", "32001", "--bind", "127.0.0.1"),
    ),
    "foreign_gpu_process_on_b200_gpu_5": (
        "b200",
        lambda host: foreign_process(
            host, "gpu_hog", STANDIN_PYTHON, "-m", "sglang_simulator.gpu_hog", "--gpus", "5", "--mib", "1024"
        ),
    ),
    "model_unknown_architecture": (
        "b200",
        lambda host: model_variant(host, "unknown-architecture", config={"architectures": ["Qwen9ForCausalLM"]}),
    ),
    "model_shard_missing": (
        "b200",
        lambda host: model_variant(host, "shard-missing", remove=["model-00004-of-00011.safetensors"]),
    ),
    "model_shard_empty": (
        "b200",
        lambda host: model_variant(host, "shard-empty", sizes={"model-00005-of-00011.safetensors": 0}),
    ),
    "model_shard_truncated": (
        "b200",
        lambda host: model_variant(host, "shard-truncated", sizes={"model-00003-of-00011.safetensors": 1 << 20}),
    ),
    "model_without_mtp": ("ct129", lambda host: model_variant(host, "without-mtp", drop_mtp=True)),
    "model_without_chat_template": (
        "ct129",
        lambda host: model_variant(host, "no-chat-template", remove=["chat_template.jinja"]),
    ),
    "tokenizer_without_processor": (
        "b200",
        lambda host: model_variant(
            host, "tokenizer-no-processor", remove=["preprocessor_config.json", "video_preprocessor_config.json"]
        ),
    ),
    "driver_550_on_ct129": ("ct129", lambda host: driver_version(host, "550.163.01")),
    # Readable by root, who runs preflight, but not by the servers' account (ProtectHome=yes; a 0600 shard).
    "model_under_home": (
        "b200",
        lambda host: model_at(host, "/home/preflight-models/Qwen3.6-27B", "/home/preflight-models"),
    ),
    "model_shard_unreadable": (
        "b200",
        lambda host: model_at(
            host,
            "/srv/models/shard-unreadable",
            "/srv/models/shard-unreadable",
            "chmod 0755 /srv/models/shard-unreadable && chmod 0644 /srv/models/shard-unreadable/*"
            " && chmod 0600 /srv/models/shard-unreadable/model-00002-of-00011.safetensors",
        ),
    ),
}


def fleet_state() -> dict[str, tuple[str, dict[str, str]]]:
    return {host: (file_digests(host), unit_starts(host)) for host in SANDBOX_HOSTS}


# How many cases share one deploy on a host. Preflight reports every problem of every host together, so the cases
# of one deploy each find their own message in its report; each deploy costs about as much as a case did alone.
CASES_PER_HOST = 4

# Where a case's problem ends its host's checks (bad_inventories.yml `stops`), so that its host reports no other
# case's problem:
STOPS = {
    # a role's argument check refuses a variable: the host fails before the gate, which reports none of its problems
    # (and its own message is the gate's, from another host, which must take part and pass its argument checks);
    "host",
    # nvidia-smi lists no GPUs: the plan (plan_host, plugins/module_utils/plan.py) checks nothing more;
    "gpus",
    # a control character in text rendered into a unit or environment file: the plan names every such variable (the
    # server role its own) and stops, so these cases may share a host with each other;
    "text",
    # derive_instances derives no instance (parallel sizes, GPUs per instance, instance count), stopping at that
    # first problem, or the instance groups are malformed: the settings and the instances are not checked.
    "derivation",
}
# What a case's message reads of its host beyond the variables it sets (bad_inventories.yml `reads`): variables, or
# these groups of them.
READ_GROUPS = {
    # The host's instances, their number, GPUs and names (ports): what a message naming or counting them depends on.
    "shape": (
        "sglang_gpu_ids",
        "sglang_tensor_parallel_size",
        "sglang_data_parallel_size",
        "sglang_pipeline_parallel_size",
        "sglang_gpus_per_instance",
        "sglang_instance_count",
        "sglang_port_base",
        "sglang_instance_groups",
    ),
    # The model directory the plan reads (its config, shards, weights, access).
    "model": ("sglang_model_path", "sglang_model", "sglang_instance_groups"),
}
# What every check of a host reads: the pinned SGLang's support table.
READ_BY_EVERY_CASE = ("sglang_version",)


def hosts_set(case: dict[str, Any]) -> set[str]:
    """The hosts whose variables the case sets (group variables set them on every host), and its setup's host."""
    hosts = set(SANDBOX_HOSTS) if case.get("group_vars") else set(case.get("host_vars") or {})
    if case.get("setup"):
        hosts.add(SETUPS[case["setup"]][0])
    return hosts


def variables_set(case: dict[str, Any]) -> set[tuple[str, str]]:
    """(host, variable) for each variable the case sets."""
    group_vars, host_vars = case.get("group_vars") or {}, case.get("host_vars") or {}
    return {(host, name) for host in hosts_set(case) for name in [*group_vars, *host_vars.get(host, {})]}


def variables_read(case: dict[str, Any]) -> set[tuple[str, str]]:
    """(host, variable) for each variable the case's message reads besides those it sets."""
    names = [*case.get("reads", []), *READ_BY_EVERY_CASE]
    return {(host, variable) for host in hosts_set(case) for name in names for variable in READ_GROUPS.get(name, (name,))}


def deployed_everywhere(case: dict[str, Any]) -> bool:
    """A case that sets only some hosts' variables deploys to those hosts only (the others would pass preflight and
    add nothing to what the case shows, at the cost of a host's run), unless its host fails preflight outright: the
    gate, run by the hosts that remain, is what reports that one."""
    return bool(case.get("group_vars") or not case.get("host_vars") or fails_preflight_outright(case))


def fails_preflight_outright(case: dict[str, Any]) -> bool:
    """Whether the case's host stops preflight before the gate (a role's argument check refused it)."""
    return case.get("stops") == "host"


def fragments_collide(case: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether a fragment of one case is part of a fragment of the other, so a line may bear either's."""
    return any(mine in theirs or theirs in mine for mine in case["expect"] for theirs in other["expect"])


def stops_allow(case: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether neither case's problem ends a check that finds the other's message (STOPS)."""
    if fails_preflight_outright(case) or fails_preflight_outright(other):
        # A host that fails reports nothing of its own; the gate of a host that does not reports it.
        return not hosts_set(case) & hosts_set(other) and not (fails_preflight_outright(case) and fails_preflight_outright(other))
    if not hosts_set(case) & hosts_set(other):
        return True
    return case.get("stops") == other.get("stops") == "text" or not (case.get("stops") or other.get("stops"))


def can_share(case: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two cases may deploy together, each then reporting exactly what it reports alone: no variable set twice
    or set by one where the other reads it, no problem that stops the check finding the other's, no fragment that
    might be found in the other's message."""
    return (
        not variables_set(case) & variables_set(other)
        and not variables_read(case) & variables_set(other)
        and not variables_read(other) & variables_set(case)
        and stops_allow(case, other)
        and not fragments_collide(case, other)
    )


def batched(cases: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The cases in deploys of cases that can share one (can_share), at most CASES_PER_HOST per host: the most
    constrained cases first (those that share with the fewest others), each into the first deploy it fits."""
    constraints = {case["id"]: sum(not can_share(case, other) for other in cases if other is not case) for case in cases}
    batches: list[list[dict[str, Any]]] = []
    for case in sorted(cases, key=lambda case: -constraints[case["id"]]):
        fits = (
            batch
            for batch in batches
            if all(can_share(case, other) for other in batch)
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


def refusal(run: Run) -> list[str]:
    """What a refused deploy said: each failed host's message, and the gate's word on a host that did not complete
    preflight (the other hosts stop there, not failed for it)."""
    said = [data["res"].get("msg") or [] for data in run.results() if data["task"].startswith(GATE_STOPS_EVERY_HOST)]
    return run.failure_messages() + [line for lines in said for line in lines]


# The cases whose setups are made for every deploy (refused): their problems may be in any deploy's report.
SET_UP = [case for case in CORPUS if case.get("setup")]


@dataclass(frozen=True)
class Deploy:
    """One refused deploy and the cases it deployed."""

    cases: list[dict[str, Any]]
    run: Run

    def lines_of(self, case: dict[str, Any]) -> list[str]:
        """The report's lines that may be the case's: those holding no fragment of another case of the deploy, nor of
        a case with a setup (made for every deploy), which may be that case's message: a case never passes thanks to
        another's."""
        others = [fragment for other in [*self.cases, *SET_UP] if other is not case for fragment in other["expect"]]
        return [line for line in refusal(self.run) if not any(fragment in line for fragment in others)]

    def reports(self, case: dict[str, Any]) -> bool:
        lines = self.lines_of(case)
        return all(any(fragment in line for line in lines) for fragment in case["expect"])


@pytest.fixture(scope="module")
def refused(sandbox: Run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Deploy], bool]]:
    """Every corpus case deployed, in batches (batched), four deploys at a time, inside all the cases' setups; and
    whether the fleet (unit and environment files, instance start times) was the same before and after all of them.

    None may change anything, and each asserts only its own message. A case whose message is not in its batch's
    report (a problem of another case hid it, which bad_inventories.yml's `stops` and `reads` did not foresee) is
    deployed again, with at most one such case of the other host, and judged by that run.
    """
    before = fleet_state()
    batches = batched(CORPUS)
    deploys: dict[str, Deploy] = {}
    again: dict[Future[Run], list[dict[str, Any]]] = {}
    waiting: dict[str, list[dict[str, Any]]] = {}  # by host: hidden cases of that host alone, until the other's come

    def deploy_again(cases: list[dict[str, Any]]) -> None:
        again[pool.submit(refuse, cases, tmp_path_factory.mktemp("again"))] = cases

    with contextlib.ExitStack() as setups:
        for name in sorted({case["setup"] for case in CORPUS if case.get("setup")}):
            host, setup = SETUPS[name]
            setups.enter_context(setup(host))
        with ThreadPoolExecutor(max_workers=4) as pool:
            first = {pool.submit(refuse, batch, tmp_path_factory.mktemp("batch")): batch for batch in batches}
            for done in as_completed(first):
                deploy = Deploy(first[done], done.result())
                for case in deploy.cases:
                    deploys[case["id"]] = deploy
                    if deploy.reports(case):
                        continue
                    if len(hosts_set(case)) != 1 or deployed_everywhere(case):
                        deploy_again([case])
                        continue
                    [host] = hosts_set(case)
                    partners = (other for other in waiting if other != host and waiting[other])
                    partner = next((other for other in partners if can_share(waiting[other][0], case)), None)
                    if partner is None:
                        waiting.setdefault(host, []).append(case)
                    else:
                        deploy_again([waiting[partner].pop(0), case])
            for cases in waiting.values():
                for case in cases:
                    deploy_again([case])
            for done, cases in again.items():
                deploys.update({case["id"]: Deploy(cases, done.result()) for case in cases})
    hidden = sorted(case["id"] for cases in again.values() for case in cases)
    print(f"{len(CORPUS)} cases in {len(batches)} deploys, and {len(hidden)} in {len(again)} more: {hidden}")
    yield deploys, fleet_state() == before


def test_corpus_is_large_and_named_uniquely() -> None:
    ids = [case["id"] for case in CORPUS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    assert all(case.get("setup") is None or case["setup"] in SETUPS for case in CORPUS)
    assert all(case.get("stops") is None or case["stops"] in STOPS for case in CORPUS)
    assert all(name in READ_GROUPS or name.startswith("sglang_") for case in CORPUS for name in case.get("reads", []))
    # The gate reports a host that failed before it: such a case says so (`stops: host`), so it deploys apart.
    assert all(fails_preflight_outright(case) for case in CORPUS if any(PREFLIGHT_FAILED in e for e in case["expect"]))


@pytest.mark.parametrize("case", CORPUS, ids=[case["id"] for case in CORPUS])
def test_bad_inventory_is_refused_before_any_change(refused: tuple[dict[str, Deploy], bool], case: dict[str, Any]) -> None:
    deploys, unchanged = refused
    result = deploys[case["id"]].run
    assert result.rc != 0
    report = "\n".join(result.failure_messages())
    lines = deploys[case["id"]].lines_of(case)
    for fragment in case["expect"]:
        assert any(fragment in line for line in lines), report
    assert result.changed() == [], result.changed()
    assert unchanged, "a refused deploy changed a unit, an environment file or restarted an instance"


def test_production_settings_pass_preflight(sandbox: Run) -> None:
    result = run_playbook("deploy.yml", tags="preflight")
    assert result.rc == 0, result.failure_messages()
    assert result.changed() == []
