"""Ansible filters of a fetched model's names (plugins/plugin_utils/model_source.py): the directory a host serves it
from and the name clients ask for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_source import CACHE_ROOM, slug

CACHE_FIX = "free space there, or set sglang_model_cache_dir to a filesystem with room for the model"
LOCK_FIX = (
    "fetch from the source the lock file was written from (sglang_model_endpoint, the revision), or, when the source "
    "changed on purpose, write the lock again with playbooks/model_lock.yml and review its diff"
)


def sglang_model_dir(source: Mapping[str, Any], root: str) -> str:
    """The host's directory of the source's revision: <root>/<org>--<name>/<revision>."""
    return f"{root.rstrip('/')}/{slug(source)}/{source.get('revision', '')}"


def sglang_model_name(source: Mapping[str, Any]) -> str:
    """The name clients use for the model by default: the repository's name, or a local source's `name`; empty
    without a source."""
    if source.get("repo"):
        return str(source["repo"]).rstrip("/").rsplit("/", 1)[-1]
    return str(source.get("name") or "")


def sglang_model_sha256(files: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The lock file's SHA-256 by file name, as the plan's probe checks them."""
    return {name: str(entry["sha256"]) for name, entry in files.items()}


def sglang_model_problems(host: str, problems: Mapping[str, str], source: Mapping[str, Any]) -> list[str]:
    """The fetch's problems (by file, by the lock file, or the cache's) as preflight problem lines of `host`."""
    fixes = {CACHE_ROOM: CACHE_FIX}
    return [
        problem_line(host, "host", "sglang_model", dict(source), f"{name}: {cause}", fixes.get(name, LOCK_FIX))
        for name, cause in sorted(problems.items())
    ]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_model_dir": sglang_model_dir,
            "sglang_model_name": sglang_model_name,
            "sglang_model_problems": sglang_model_problems,
            "sglang_model_sha256": sglang_model_sha256,
        }
