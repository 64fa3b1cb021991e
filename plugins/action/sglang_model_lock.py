"""Action plugin: record a model source's files (size and SHA-256 of each) in the lock file, for every deploy to check.

Runs on the control node only: no module runs on a host. A Hub source is read from the server's tree at the commit
(an LFS file's SHA-256 as the server records it; a small file's by downloading it), a directory source by hashing it.
A Hub branch or tag is accepted here and resolved to its commit, which the deploy's source must then name.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_lock import (
    ModelSourceError,
    lock_entry_text,
    read_lock,
    write_lock,
)
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import (
    ARGUMENT_SPEC as SOURCE_ARGUMENT_SPEC,
)
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import (
    hide_progress_bars,
    is_commit,
    is_hub,
    remote_files,
    resolve_revision,
    source_key,
    source_problems,
    validated_arguments,
)

ARGUMENT_SPEC = SOURCE_ARGUMENT_SPEC


def pinned_source(source: dict[str, Any], endpoint: str, token: str) -> dict[str, Any]:
    """The source with a Hub branch or tag replaced by the commit it names now."""
    if not is_hub(source) or is_commit(source["revision"]):
        return source
    return {**source, "revision": resolve_revision(source, endpoint, token)}


def diff(lock_file: str, key: str, before: Any, after: dict[str, Any]) -> dict[str, str]:
    header = f"{lock_file}: {key}"
    before_text = lock_entry_text(before if isinstance(before, dict) else None)
    return {"before_header": header, "after_header": header, "before": before_text, "after": lock_entry_text(after)}


class ActionModule(ActionBase):  # type: ignore[misc]
    """Arguments: `source` (a model source; a Hub revision may be a branch or tag), `lock_file`, `endpoint`, `token`."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def lock(self, args: dict[str, Any]) -> dict[str, Any]:
        """Reads the source's files and records them; raises ModelSourceError for what keeps it from doing so."""
        problems = source_problems(args["source"], pinned=False)
        if problems:
            raise ModelSourceError("; ".join(problems))
        if is_hub(args["source"]):
            hide_progress_bars()
        source = pinned_source(args["source"], args["endpoint"], args["token"])
        key = source_key(source)
        files = remote_files(source, args["endpoint"], args["token"])
        if not files:
            raise ModelSourceError(f"{key}: the source selects no files (check allow_patterns and ignore_patterns)")
        before = (read_lock(args["lock_file"]).get(key) or {}).get("files")
        changed = write_lock(args["lock_file"], key, files, check_mode=self._task.check_mode)
        result: dict[str, Any] = {"changed": changed, "key": key, "revision": source["revision"], "files": files}
        if source["revision"] != args["source"]["revision"]:
            result["warnings"] = [
                f"revision {args['source']['revision']!r} is commit {source['revision']}: pin the commit in the model source"
            ]
        if self._task.diff and changed:
            result["diff"] = diff(args["lock_file"], key, before, dict(files))
        return result

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = validated_arguments(self, ARGUMENT_SPEC)
        try:
            result.update(self.lock(args))
        except ModelSourceError as error:
            raise AnsibleActionFail(str(error)) from error
        return result
