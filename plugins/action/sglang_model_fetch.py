"""Action plugin: bring a model source's locked files into the control node's cache, verified, as a snapshot directory.

Runs on the control node only: no module runs on a host. Each file is checked against the lock file's size and SHA-256
(plugin_utils/model_source.py); what cannot be brought to the lock is returned as `problems`, never a failed task, so
the role reports it with its other preflight problems. The cache is the control node's own: check mode fetches too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe
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


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `source` (a model source), `lock_file`, `cache_dir`, `endpoint`, `token`."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True  # it changes only the control node's cache, the same in check mode

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = validated_arguments(self, ARGUMENT_SPEC)
        result.update(fetch_source(args))
        return result
