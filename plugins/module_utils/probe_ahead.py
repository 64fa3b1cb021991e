"""Deploy's probe answered ahead: its last request kept on the host, made again by the next run's fact gathering.

Deploy's probe (module sglang_instance_files with `requests`) compares the files every role would write with the host
and makes every role's reads. Its request can only be made once the plan is known, so it costs a second round trip
after the plan's gathering, though a converged host's request is the same run after run. So the probe keeps its
request on the host (each file's content as its sha256; a router's key as it is; the file readable by the user the
module runs as alone), signed with an HMAC under the control node's key (plugin_utils/probe_key.py, sent to the host
for the call as an option Ansible does not log), and the next gathering (module sglang_host_facts) makes that
request's comparisons and reads in its own call, only when it is signed so. It returns their answers with that
signature; the probe uses them only when its own request has the same: the same request, answered during this run.
"""

from __future__ import annotations

import grp
import hashlib
import hmac
import json
import os
import pwd
import threading
from collections.abc import Mapping, Sequence
from typing import Any


def content_digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def hashed_request(requests: Mapping[str, Any], private_contents: Sequence[str]) -> dict[str, Any]:
    """The probe's `requests` as kept: each file by its path, owner, group, mode and content's sha256 (a private one's
    content taken from `private_contents`), the reads as they are, and each router with its key instead of its index."""
    kept: dict[str, Any] = {}
    for name, request in requests.items():
        entry: dict[str, Any] = {
            "files": [
                {
                    **{key: spec[key] for key in ("path", "owner", "group", "mode")},
                    "sha256": content_digest(
                        private_contents[int(spec["private"])] if spec.get("private") is not None else str(spec["content"])
                    ),
                }
                for spec in request.get("files") or []
            ]
        }
        if request.get("read") is not None:
            entry["read"] = request["read"]
        if request.get("routers"):
            entry["routers"] = with_keys(request["routers"], private_contents)
        kept[name] = entry
    return kept


def with_keys(routers: Sequence[Mapping[str, Any]], private_contents: Sequence[str]) -> list[dict[str, Any]]:
    """Each router with its admin key in place of its index into the private contents."""
    return [{**router, "api_key": private_contents[int(router["api_key"])]} for router in routers]


def text(kept: Mapping[str, Any]) -> str:
    """The one text of a kept request, byte for byte the same wherever it is made."""
    return json.dumps(kept, sort_keys=True, separators=(",", ":"))


def signature(key: bytes, kept_text: str) -> str:
    return hmac.new(key, kept_text.encode(), hashlib.sha256).hexdigest()


def kept_file(kept_text: str, kept_signature: str) -> str:
    """What the kept request's file holds: its signature, then its text (read_kept reads it)."""
    return f"{kept_signature}\n{kept_text}"


def read_kept(path: str, key: bytes) -> tuple[str, str] | None:
    """The request kept at `path` (its signature and text) when this user alone could have written it (no link, this
    user's, no access for others) and it carries its signature under `key`: only a request the control node signed is
    ever made."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        status = os.fstat(handle.fileno())
        if status.st_uid != os.geteuid() or status.st_mode & 0o077:
            return None
        kept_signature, _newline, kept_text = handle.read().partition("\n")
    return (kept_signature, kept_text) if hmac.compare_digest(kept_signature, signature(key, kept_text)) else None


def account_ids(owner: str, group: str) -> tuple[int, int]:
    """The uid of `owner` and the gid of `group`; KeyError when either does not exist."""
    return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid


def attributes_differ(status: os.stat_result, owner: str, group: str, mode: int) -> bool:
    """Whether a file's owner, group or mode differ from those given (an account that does not exist yet: they do)."""
    try:
        ids = account_ids(owner, group)
    except KeyError:
        return True
    return (status.st_uid, status.st_gid, status.st_mode & 0o7777) != (*ids, mode)


def file_differs(spec: Mapping[str, Any]) -> bool:
    """Whether the file of a kept request's `spec` differs from it, as module sglang_instance_files compares."""
    path = str(spec["path"])
    try:
        with open(path, "rb") as handle:
            current = handle.read()
    except FileNotFoundError:
        return True
    if hashlib.sha256(current).hexdigest() != spec["sha256"]:
        return True
    return attributes_differ(os.stat(path), str(spec["owner"]), str(spec["group"]), int(str(spec["mode"]), 8))


def answers(kept: Mapping[str, Any]) -> dict[str, Any]:
    """What the probe answers for each request of `kept`: its changed paths, its reads and its routers' differences,
    with no diff (the probe asks for none)."""
    from ansible_collections.sglang.fleet.plugins.module_utils.installed import probe
    from ansible_collections.sglang.fleet.plugins.module_utils.sglang_router_client import routers_differences

    return {
        name: {"changed_paths": [str(spec["path"]) for spec in entry["files"] if file_differs(spec)], "diff": []}
        | ({"read": probe(entry["read"])} if "read" in entry else {})
        | ({"routers": routers_differences(entry["routers"])} if "routers" in entry else {})
        for name, entry in kept.items()
    }


def answer_ahead(path: str, key: str) -> dict[str, Any]:
    """The kept request at `path` answered when the control node signed it with `key` (hex): {signature, answers};
    {} when none is kept there, it is not signed so or it cannot be answered (one of another format, say), which the
    probe then asks itself."""
    try:
        kept = read_kept(path, bytes.fromhex(key))
        if kept is None:
            return {}
        return {"signature": kept[0], "answers": answers(json.loads(kept[1]))}
    except Exception:  # anything a kept file holds only means no answer ahead
        return {}


class AnswerAhead(threading.Thread):
    """answer_ahead(path, key) in a thread of its own, started when made: its reads mostly wait on the commands they
    run, beside the caller's own work; answer() waits for it."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(daemon=True)
        self.path, self.key = path, key
        self.answered: dict[str, Any] = {}
        self.start()

    def run(self) -> None:
        self.answered = answer_ahead(self.path, self.key)

    def answer(self) -> dict[str, Any]:
        self.join()
        return self.answered
