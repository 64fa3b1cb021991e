"""What each role of deploy.yml would change on a host, decided from deploy's one probe: data, not templates.

Deploy's probe (action sglang_instance_files, `requests`) compares and reads, in one call, what every role asked
(its request). A request's `decide` holds the settings its role's decision needs; `decide(name, settings, answer)`
returns that role's decision from them and the host's answer, each with `changes` (one line per thing to change, in
the words deploy prints: empty when nothing would change). The roles' tasks run each step exactly when its part of
the decision says so, and deploy.yml ends a host where no role's `changes` has anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

Decision = dict[str, Any]


def unique(items: Iterable[Any]) -> list[Any]:
    """`items` without repeats, in their order (Ansible's `unique` and `difference` filters of lists)."""
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def suffixed(items: Iterable[str], suffix: str) -> list[str]:
    return [f"{item}{suffix}" for item in items]


def plan(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The plan's entry point verified: the record of the model files this run read and hashed (`hashed`)."""
    hashed = settings.get("hashed") or []
    return {"changes": [f"{settings['verified_file']}: {len(hashed)} file(s) verified to record"] if hashed else []}


def cuda(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """CUDA: what the probe found different from the pinned install, and the apt method's files to write."""
    return {"changes": [*(answer.get("read") or {}).get("differences", []), *answer.get("changed_paths", [])]}


def sglang_venv(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The runtime: install it (`install`), prune the previous venvs (`prunable`), parse the command lines with it
    (`parse`: with this release's checker installed, unless it parsed these very ones before: its marker, a file
    `<venv>/.parsed-<digest>` the request read) and then keep the marker that it did (`marks_parsed`). Settings: venv
    (its path), venvs (the glob of this runtime's venvs), keep_previous, checker."""
    state = answer.get("read") or {}
    found: Mapping[str, list[str]] = state.get("found") or {}
    differences = list(state.get("differences") or [])
    installed = bool(found.get(settings["checker"]))
    parsed_before = any(paths for glob, paths in found.items() if glob.startswith(f"{settings['venv']}/.parsed-"))
    checker_current = settings["checker"] not in (state.get("differing_paths") or [])
    parse = installed and checker_current and not (parsed_before and not differences)
    previous = [path for path in found.get(settings["venvs"], []) if path != settings["venv"]]
    prunable = len(previous) > int(settings["keep_previous"])
    marks_parsed = parse and not differences
    changes = [
        *differences,
        *(["previous venvs beyond sglang_venv_keep_previous"] if prunable else []),
        *(["the marker that the runtime parsed these command lines: to write"] if marks_parsed else []),
    ]
    return {
        "installed": installed,
        "install": bool(differences),
        "parse": parse,
        "prunable": prunable,
        "marks_parsed": marks_parsed,
        "changes": changes,
    }


def sglang_model(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The model's revision: the lock's files the host lacks or has wrong (`to_send`; of them, `wrong`: at their full
    size, removed before the transfer), whether its `current` link points at it (`link_current`; `install` when either
    needs it), and the revisions beyond those kept (`prunable`, newest kept). Settings: model (the
    sglang_model; empty: none), source (sglang_model_source), on_host (sglang_model_on_host), keep_previous."""
    source: Mapping[str, Any] = settings.get("source") or {}
    on_host: Mapping[str, Any] = settings.get("on_host") or {}
    files = list((source.get("files") or {}).keys())
    problems = on_host.get("checksum_problems") or {}
    to_send = unique(name for name in problems if name in files) if on_host.get("exists") else files
    link_current = on_host.get("link_target") == source.get("path")
    revisions = [revision for revision in on_host.get("revisions") or [] if revision["path"] != source.get("path", "")]
    prunable = sorted(revisions, key=lambda revision: revision["mtime"], reverse=True)[int(settings["keep_previous"]) :]
    changes: list[str] = []
    if settings.get("model"):
        changes += [f"{source.get('path', '')}/{name}" for name in to_send]
        changes += [] if link_current else [f"{source.get('link', '')}: to point at {source.get('path', '')}"]
    changes += [revision["path"] for revision in prunable]
    install = bool(settings.get("model")) and (bool(to_send) or not link_current)
    # Of the files to send, those present at their full size or longer: wrong, not cut short, so removed before the
    # transfer (rsync appends to a shorter file and checks the whole; it leaves one of the full size alone).
    verified: Mapping[str, Mapping[str, Any]] = on_host.get("verified") or {}
    sizes = {name: int((verified.get(f"{source.get('path')}/{name}") or {}).get("size", -1)) for name in to_send}
    wrong = [name for name in to_send if sizes[name] >= int(source["files"][name]["size"])]
    return {
        "to_send": to_send,
        "wrong": wrong,
        "link_current": link_current,
        "install": install,
        "prunable": prunable,
        "changes": changes,
    }


def utc_seconds(timestamp: str) -> float | None:
    """A `systemctl show --timestamp=us+utc` time ("Mon 2026-11-30 02:02:20.870662 UTC") as Unix seconds."""
    try:
        moment = datetime.strptime(timestamp.strip(), "%a %Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        return None
    return moment.replace(tzinfo=timezone.utc).timestamp()


def server_units(instances: Sequence[Mapping[str, Any]], reading: Mapping[str, Any]) -> Decision:
    """The instances' units as `reading` (module sglang_installed's units and mtimes) has them: `stale` (running, and
    one of the files of its verified set, or its TLS certificate or key, changed after its process started), `stopped`
    (not running), `failed_units`, `not_enabled` (units), and of those `unknown_units`, the units systemd has no file of
    (no UnitFileState: in check mode, a unit this run would write)."""
    states: Mapping[str, Mapping[str, str]] = reading.get("units") or {}
    changed_at: Mapping[str, float] = reading.get("mtimes") or {}
    active = [unit for unit, state in states.items() if state.get("ActiveState") == "active"]
    enabled = [unit for unit, state in states.items() if state.get("UnitFileState") == "enabled"]
    not_enabled = unique(instance["unit"] for instance in instances if instance["unit"] not in enabled)
    stale = []
    for instance in instances:
        state = states.get(instance["unit"], {})
        started = utc_seconds(state.get("ExecMainStartTimestamp", ""))
        # Its TLS certificate and key too (`tls_files`): SGLang reads them once, at its start (a rotated key would
        # otherwise go on serving the old one, and a new CA's routers refuse the old certificate).
        read_at_start = [*(path for path, _copy in instance["files"]["last_good"]), *(instance.get("tls_files") or [])]
        changed = max((changed_at.get(path, 0.0) for path in read_at_start), default=0.0)
        if state.get("ActiveState") == "active" and started is not None and changed > started:
            stale.append(instance)
    return {
        "stale": stale,
        "stopped": [instance for instance in instances if instance["unit"] not in active],
        "failed_units": [unit for unit, state in states.items() if state.get("ActiveState") == "failed"],
        "not_enabled": not_enabled,
        "unknown_units": [unit for unit in not_enabled if not states.get(unit, {}).get("UnitFileState")],
    }


def sglang_server(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The servers: the account and its folders (`differences`), the files to write (`files_to_write`), key files and
    units no planned instance has (`unwanted_keys`, `unplanned_units`), whether the device-node unit runs, and the
    instances' units (server_units); `configure` when any file, account or unit needs it; `to_check`, the instances
    this deploy would start or restart (preflight checks CUDA in their sandbox). Settings: instances, unit_dir,
    secrets_dir, tls_absent (the TLS files not wanted: removed with the unwanted keys), devices_unit, displaced (units a
    new shape stops first)."""
    instances: Sequence[Mapping[str, Any]] = settings.get("instances") or []
    read = answer.get("read") or {}
    found: Mapping[str, list[str]] = read.get("found") or {}
    units = [instance["unit"] for instance in instances]
    found_units = [
        os.path.basename(path)
        for path in found.get(f"{settings['unit_dir']}/sglang-*.service", [])
        if re.match(r".*/sglang-\d+\.service$", path)
    ]
    keys = [instance["files"]["secret"] for instance in instances if instance["files"].get("secret")]
    unwanted_keys = unique(
        [
            *(
                path
                for path in found.get(f"{settings['secrets_dir']}/sglang-*.yaml", [])
                if re.match(r".*/sglang-\d+\.yaml$", path) and path not in keys
            ),
            # The instances' TLS files without a certificate (or a CA) now (filter sglang_server_tls: `absent`).
            *(path for absent in settings.get("tls_absent") or [] for path in found.get(absent, [])),
        ]
    )
    unplanned_units = unique(unit for unit in found_units if unit not in units)
    devices = (read.get("units") or {}).get(settings["devices_unit"]) or {}
    devices_running = devices.get("ActiveState") == "active" and devices.get("UnitFileState") == "enabled"
    differences = list(read.get("differences") or [])
    files_to_write = list(answer.get("changed_paths") or [])
    now = server_units(instances, read)
    changed = answer.get("changed_instances") or []
    changes = [
        *differences,
        *files_to_write,
        *unwanted_keys,
        *unplanned_units,
        *([] if devices_running else [f"{settings['devices_unit']}: not running"]),
        *suffixed(settings.get("displaced") or [], ": displaced"),
        *suffixed((instance["unit"] for instance in now["stale"]), ": stale"),
        *suffixed((instance["unit"] for instance in now["stopped"]), ": not running"),
        *suffixed(now["not_enabled"], ": not enabled"),
    ]
    return {
        **now,
        "differences": differences,
        "files_to_write": files_to_write,
        "unwanted_keys": unwanted_keys,
        "unplanned_units": unplanned_units,
        "devices_running": devices_running,
        "configure": bool(differences or files_to_write or unwanted_keys or unplanned_units or not devices_running),
        "to_check": [
            *(instance for instance in instances if instance["name"] in changed),
            *(instance for instance in now["stopped"] if instance["name"] not in changed),
        ],
        "changes": changes,
    }


def sglang_router(settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The host's sglang-router processes (settings `processes`, each {enabled, unit, url, keys_file, workers_file,
    displaced, by_model}; `legacy_files`, removed when found; `unit_dir`; `vocabulary`, the vocabulary's path): the
    router's account or folders differing (`account`, a line each), files to remove (`found_removable`), units not
    running or not enabled (`stopped_units`), routers whose workers differ from the planned ones or that the probe could
    not ask (`unreconciled`), routers that take back the workers a new shape stops first (`drained`), unit files of
    processes no longer wanted (`unwanted_units`)."""
    processes: Sequence[Mapping[str, Any]] = settings.get("processes") or []
    enabled = [process for process in processes if process["enabled"]]
    unwanted = [process for process in processes if not process["enabled"]]
    read = answer.get("read") or {}
    found: Mapping[str, list[str]] = read.get("found") or {}
    on_host = [path for paths in found.values() for path in paths]
    removable = [
        *(process["keys_file"] for process in unwanted),
        *(process["workers_file"] for process in unwanted),
        *(settings.get("legacy_files") or []),
    ]
    states: Mapping[str, Mapping[str, str]] = read.get("units") or {}
    down = [unit for unit, state in states.items() if state.get("ActiveState") != "active"]
    down += [unit for unit, state in states.items() if state.get("UnitFileState") != "enabled"]
    agreeing = [url for url, differs in (answer.get("routers") or {}).items() if not differs]
    by_model = any(process["by_model"] for process in enabled)
    vocabulary = str(settings.get("vocabulary") or "")
    differences = list(read.get("differences") or [])
    vocabulary_differs = bool(vocabulary) and vocabulary in (read.get("differing_paths") or [])
    account = [line for line in differences if not (vocabulary and line.startswith(vocabulary + ":"))]
    decision: Decision = {
        "by_model": by_model,
        "account": account,
        "found_removable": [path for path in removable if path in on_host],
        "stopped_units": [process["unit"] for process in enabled if process["unit"] in down],
        "unreconciled": [process["url"] for process in enabled if process["url"] not in agreeing],
        "drained": [process["url"] for process in enabled if process["displaced"]],
        "unwanted_units": [path for process in unwanted for path in found.get(f"{settings['unit_dir']}/{process['unit']}", [])],
        "files_to_write": list(answer.get("changed_paths") or []),
        "vocabulary": by_model and vocabulary_differs,
    }
    decision["changes"] = [
        *decision["account"],
        *decision["found_removable"],
        *decision["files_to_write"],
        *(line for line in differences if line not in account),  # the vocabulary's
        *suffixed(decision["stopped_units"], ": not running or not enabled"),
        *suffixed(decision["unreconciled"], ": workers differ from the planned ones"),
        *suffixed(decision["drained"], ": to register again the workers a new shape stops first"),
        *decision["unwanted_units"],
    ]
    return decision


def routers_first(
    processes: Sequence[Mapping[str, Any]], router: Mapping[str, Any], server: Mapping[str, Any], unit_dir: str
) -> list[dict[str, Any]]:
    """The host's running router processes (`processes`, the enabled ones) that restart before its instances roll, each
    with its `unit_path`: those that verify workers over https with a CA (smg's --ca-cert-paths, read once, at their
    start) where this run writes their unit (it gains the CA: the instances turn to https) or that CA (the server role's
    file: `server`'s decision). Restarted after the rollout, as every other router is (its keys must stay those the
    running instances hold until they roll), such a router could not verify an instance the rollout puts back over
    https: the rollout would fail and roll it back. `router`: this role's decision (a unit not running restarts
    nothing: the rollout finds no router to take instances out of). Each also with the workers as the instances may
    serve them before they roll (`serving_workers`, `serving_models`: each https worker at its plain http URL too), for a
    router that restarts without a workers file (moved to its own account in this run) to register the answering ones."""
    written = [*(router.get("files_to_write") or []), *(server.get("files_to_write") or [])]
    stopped = router.get("stopped_units") or []
    first = []
    for process in processes:
        argv = list(process.get("argv") or [])
        ca = argv[argv.index("--ca-cert-paths") + 1] if "--ca-cert-paths" in argv[:-1] else ""
        unit_path = f"{unit_dir}/{process['unit']}"
        if ca and process["unit"] not in stopped and (unit_path in written or ca in written):
            serving = {url: model for worker, model in _models(process).items() for url in _either_scheme(worker)}
            first.append({**process, "unit_path": unit_path, "serving_workers": list(serving), "serving_models": serving})
    return first


def _models(process: Mapping[str, Any]) -> dict[str, str]:
    models: Mapping[str, Any] = process.get("models") or {}
    return {str(url): str(models.get(url) or "") for url in process.get("workers") or []}


def _either_scheme(url: str) -> list[str]:
    """An https worker's URL and the plain http one it served at before TLS turned on; a plain one alone."""
    return [url, "http://" + url[len("https://") :]] if url.startswith("https://") else [url]


def changed(result: Any) -> bool:
    """Ansible's `changed` test of a registered result (a loop's too: its `changed` says whether any item changed)."""
    return isinstance(result, Mapping) and bool(result.get("changed"))


def server_rolling(
    instances: Sequence[Mapping[str, Any]],
    decision: Mapping[str, Any],
    registered: Mapping[str, Any],
    check_mode: bool,
    leftovers: bool = False,
) -> Decision:
    """The servers as this run left them so far, from deploy's probe's `decision` (sglang_server) and the server tasks'
    `registered` results (`removed_keys`, `instance_files`, `displaced`, `rolled`, `reread`; each absent or skipped
    where its task did not run): `host_changed` (any of the first four changed something), `units` (the instances'
    units as last read: by the probe, or by tasks/roll.yml's `reread` once this run changed files or units;
    server_units), `would_roll` (in check mode no file changes: the running instances whose files this run would
    change) and `to_roll`, what a rollout restarts: `would_roll` in check mode (unless rolling an earlier run's
    `leftovers`), else the stale instances; either without an instance that spans hosts (tasks/nodes.yml restarts
    every node of it together)."""
    host_changed = any(changed(registered.get(name)) for name in ("removed_keys", "instance_files", "displaced", "rolled"))
    reread: Mapping[str, Any] = registered.get("reread") or {}
    units = server_units(instances, reread) if reread and not reread.get("skipped") else decision
    written = registered.get("instance_files") or {}
    # An instance whose files change, or whose TLS certificate or key (shared by the host's instances) does.
    changed_paths = set(written.get("changed_paths") or [])
    changed_instances = [
        instance["name"]
        for instance in instances
        if instance["name"] in (written.get("changed_instances") or []) or changed_paths & set(instance.get("tls_files") or [])
    ]
    stopped = [instance["unit"] for instance in units["stopped"]]
    would_roll = [instance for instance in instances if instance["name"] in changed_instances and instance["unit"] not in stopped]
    rolling = would_roll if check_mode and not leftovers else units["stale"]
    return {
        "host_changed": host_changed,
        "units": units,
        "would_roll": would_roll,
        "to_roll": [instance for instance in rolling if "nodes" not in instance],
    }


def changed_items(*registered: Any) -> list[Any]:
    """The items whose task changed something, of each of the loops' `registered` results (absent: none), in order."""
    results = (result for loop in registered if isinstance(loop, Mapping) for result in loop.get("results") or [])
    return [result["item"] for result in results if changed(result)]


ROLES: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Decision]] = {
    "sglang_plan": plan,
    "cuda": cuda,
    "sglang_venv": sglang_venv,
    "sglang_model": sglang_model,
    "sglang_server": sglang_server,
    "sglang_router": sglang_router,
}


def decide(role: str, settings: Mapping[str, Any], answer: Mapping[str, Any]) -> Decision:
    """The decision of `role` (a request's name) from its request's `decide` settings and the probe's answer to it."""
    if role not in ROLES:
        raise ValueError(f"no decision for a request named {role!r}; known: {', '.join(ROLES)}")
    return ROLES[role](settings, answer)
