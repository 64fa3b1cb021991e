"""Action plugin: bring a model source's locked files into the control node's cache, verified, as a snapshot directory.

Runs on the control node only: no module runs on a host. Each file is checked against the lock file's size and SHA-256
(plugin_utils/model_source.py); what cannot be brought to the lock is returned as `problems`, never a failed task, so
the role reports it with its other preflight problems. The cache is the control node's own: check mode fetches too.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.filter.sglang_model import (
    sglang_model_dir,
    sglang_model_name,
    sglang_model_problems,
    sglang_model_sha256,
)
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe
from ansible_collections.sglang.fleet.plugins.plugin_utils.host_variables import host_variable
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_lock import LOCK_PLAYBOOK, ModelSourceError, read_lock
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import (
    ARGUMENT_SPEC as SOURCE_ARGUMENT_SPEC,
)
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import (
    fetch,
    slug,
    source_key,
    source_problems,
    validated_arguments,
)

ARGUMENT_SPEC: dict[str, Any] = {**SOURCE_ARGUMENT_SPEC, "cache_dir": {"type": "path", "required": True}}


def locked_files(lock_file: str, key: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The lock entry's files for the key, and the problem (by the lock file's path) when there are none."""
    try:
        entry = read_lock(lock_file).get(key)
    except ModelSourceError as error:
        return {}, {lock_file: str(error)}
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict) or not entry["files"]:
        return {}, {lock_file: f"no entry for {key}: run {LOCK_PLAYBOOK}"}
    return dict(entry["files"]), {}


def fetch_source(args: dict[str, Any]) -> dict[str, Any]:
    """The task's result for validated arguments: the fetch, or the problems that kept it from starting."""
    source = args["source"]
    problems = source_problems(source)
    if problems:
        return {"changed": False, "problems": {"source": "; ".join(problems)}, "facts": {}}
    key = source_key(source)
    files, lock_problem = locked_files(args["lock_file"], key)
    described = {"key": key, "slug": slug(source), "revision": str(source["revision"]), "files": files}
    if lock_problem:
        return {"changed": False, **described, "problems": lock_problem, "facts": {}}
    fetched = fetch(source, files, args["cache_dir"], args["endpoint"], args["token"])
    return {
        "changed": fetched.fetched_bytes > 0,
        **described,
        **dataclasses.asdict(fetched),
        # A copy with a file missing or wrong is no model to check: the problems are what preflight reports.
        "facts": {} if fetched.problems else describe(fetched.snapshot, {}),
    }


# Role sglang_model's preflight: the task gives no arguments, the action reads them from the role's variables.
ROLE_ARGUMENTS = {
    "source": "sglang_model",
    "lock_file": "sglang_model_lock_file",
    "cache_dir": "sglang_model_cache_dir",
    "endpoint": "sglang_model_endpoint",
    "token": "sglang_model_token",
}


def published(host: str, fetched: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """What role sglang_model publishes of `host`'s fetch (`fetched`: empty without a model): `source`, the fact
    sglang_model_source (the model's name, the host's directory of the revision and its `current` link, the control
    node's snapshot and the lock's files with their SHA-256, how other hosts reach this one to copy the revision, the
    snapshot's facts unless it has problems; empty without a model), and `problems`, its preflight problem lines.
    `settings`: the role's variables (sglang_model, sglang_model_root, sglang_model_peer_*, sglang_model_seed_hosts)."""
    model, root = settings["sglang_model"], settings["sglang_model_root"]
    problems = fetched.get("problems") or {}
    lines = sglang_model_problems(
        host, problems, model, settings["sglang_model_peer_user"], settings["sglang_model_seed_hosts"], root
    )
    if not model:
        return {"source": {}, "problems": lines}
    path = sglang_model_dir(model, root)
    files = fetched.get("files") or {}
    source = {
        "name": sglang_model_name(model),
        "path": path,
        "link": f"{os.path.dirname(path)}/current",
        "snapshot": fetched.get("snapshot", ""),
        "files": files,
        "sha256": sglang_model_sha256(files),
        "peer": {
            "address": settings["sglang_model_peer_address"],
            "port": int(settings["sglang_model_peer_port"]),
            "user": settings["sglang_model_peer_user"],
        },
        "facts": {} if problems else fetched.get("facts") or {},
    }
    return {"source": source, "problems": lines}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `source` (a model source), `lock_file`, `cache_dir`, `endpoint`, `token`. Without any (role
    sglang_model's preflight), from the role's variables (ROLE_ARGUMENTS; no fetch without an sglang_model), and the
    result's `published` is what the role publishes of it (published())."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True  # it changes only the control node's cache, the same in check mode

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        if self._task.args:
            result.update(fetch_source(validated_arguments(self, ARGUMENT_SPEC)))
            return result
        task_vars = task_vars or {}

        def variable(name: str) -> Any:
            return host_variable(self._templar, task_vars, name)

        # Without an sglang_model, only what its problems read (as the task the role skipped then): a fetch's or a
        # peer's variable (a token from a lookup, say) is not templated for a host that fetches nothing.
        names = ["sglang_model", "sglang_model_root", "sglang_model_seed_hosts", "sglang_model_peer_user"]
        settings = {name: variable(name) for name in names}
        fetched: dict[str, Any] = {}
        if settings["sglang_model"]:
            more = [*ROLE_ARGUMENTS.values(), "sglang_model_peer_address", "sglang_model_peer_port"]
            settings.update({name: variable(name) for name in more if name not in settings})
            args = {argument: settings[name] for argument, name in ROLE_ARGUMENTS.items()}
            for path in ("lock_file", "cache_dir"):  # as the argument's type (path) expands them
                args[path] = os.path.expanduser(os.path.expandvars(str(args[path])))
            fetched = fetch_source(args)
        result.update(fetched)
        result["published"] = published(str(task_vars["inventory_hostname"]), fetched, settings)
        return result
