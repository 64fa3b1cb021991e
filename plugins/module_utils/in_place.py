"""Whether a running instance can take its new configuration without a restart (issue 42), decided from files alone.

A new model revision is applied in place, with SGLang's POST /update_weights_from_disk (0.5.17 and 0.5.23), exactly
when everything else stays as it is:

* the new unit's command line differs from the last verified one only in the values of --model-path and of
  --speculative-draft-model-path / --tokenizer-path where they named the same directory: another revision directory
  (`<root>/<org>--<name>/<revision>`) of the same repository;
* the unit's other lines, the environment file and the key file are byte for byte the last verified ones (a changed
  limit or sandbox setting takes effect only at a start);
* the new revision's config.json is the old one's (architecture, shapes, MTP layers), and its safetensors shards hold
  the same tensors with the same shapes and dtypes (so the parallel layout and the speculative setup are unchanged);
* every other file of the revision (tokenizer, chat template, generation_config.json, ...) is byte for byte the old
  one's: /update_weights_from_disk reloads weights only, so a new tokenizer or template needs a restart;
* every shard of the new revision is whole (SGLang 0.5.17 kills the server when a shard is cut short: recorded,
  tests/recordings/sglang-0.5.17-h100-restarts).

Everything else (a flag, an environment value, the key, another model, a shape change) restarts the instance.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

# A revision's files that /update_weights_from_disk reloads (weights, and the index naming their shards); every other
# file must be the old revision's, compared by digest up to this size (a larger one restarts the instance).
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")
MAX_OTHER_FILE = 64 * 1024 * 1024
PATH_FLAGS = ("--model-path", "--speculative-draft-model-path", "--tokenizer-path")
# The safetensors format's own limit on a header (the safetensors library refuses a longer one): the length a shard
# states is read only up to it, so a file that states 2**63 costs root no memory.
MAX_HEADER = 100_000_000


def exec_start(unit_text: str) -> list[str] | None:
    """The ExecStart= command line of a unit the fleet wrote (systemd_exec_quote), as words; None without one."""
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line[len("ExecStart=") :])
            return [word.replace("$$", "$").replace("%%", "%") for word in words]
    return None


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def revision_change(old_argv: list[str], new_argv: list[str]) -> tuple[str, str] | None:
    """(old model directory, new one) when the two command lines differ only in the model's revision directory."""
    old, new = _value(old_argv, "--model-path"), _value(new_argv, "--model-path")
    if not old or not new or old == new or len(old_argv) != len(new_argv):
        return None
    if os.path.dirname(old.rstrip("/")) != os.path.dirname(new.rstrip("/")):
        return None  # another repository (or a local source of another name)
    for index, (before, after) in enumerate(zip(old_argv, new_argv, strict=True)):
        if before == after:
            continue
        if index == 0 or old_argv[index - 1] not in PATH_FLAGS or (before, after) != (old, new):
            return None
    return old, new


def shard_layout(path: str) -> dict[str, Any] | None:
    """A safetensors shard's tensors (name -> dtype and shape), None when its header or data is cut short."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a FIFO would block root's read forever
        with open(path, "rb") as handle:
            raw = handle.read(8)
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER:
                return None
            header = json.loads(handle.read(length))
        size = os.path.getsize(path)
    except (OSError, ValueError, struct.error):
        return None
    tensors = {name: t for name, t in header.items() if name != "__metadata__" and isinstance(t, dict)}
    end = max((int(t["data_offsets"][1]) for t in tensors.values()), default=0)
    if size != 8 + length + end:
        return None
    return {name: [t.get("dtype"), t.get("shape")] for name, t in tensors.items()}


def model_layout(directory: str) -> dict[str, Any] | None:
    """config.json and every shard's tensors of a model directory; None when a file is missing or a shard is cut."""
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        shards = sorted(name for name in os.listdir(directory) if name.endswith(".safetensors"))
    except (OSError, ValueError):
        return None
    tensors: dict[str, Any] = {}
    for shard in shards:
        layout = shard_layout(os.path.join(directory, shard))
        if layout is None:
            return None
        tensors.update(layout)
    others = other_files(directory)
    return {"config": config, "tensors": tensors, "others": others} if tensors and others is not None else None


def other_files(directory: str) -> dict[str, str] | None:
    """The SHA-256 of each file of a model directory that is no weight (tokenizer, templates, configs), by name; None
    when one is not a regular file or is larger than MAX_OTHER_FILE."""
    digests: dict[str, str] = {}
    try:
        for name in sorted(os.listdir(directory)):
            if name.endswith(WEIGHT_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            status = os.stat(path)
            if stat.S_ISDIR(status.st_mode):
                continue  # a subfolder (a hub checkout's .cache): no file the server reads
            if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_OTHER_FILE:
                return None
            with open(path, "rb") as handle:
                digests[name] = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    return digests


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def as_verified(instance: Mapping[str, Any]) -> dict[str, Any]:
    """The instance as its last verified files serve it: what runs until the rollout restarts it (the routers know it
    by these URLs), and what a rollback restores. Its `url` and `remote_url` are https where the last verified unit's
    command line has --ssl-certfile (SGLang then serves only https), else http: the run that turns TLS on (or off)
    writes the other scheme. As planned where it has no verified copy (it never passed verification), or carries no
    files at all (playbooks/remove.yml's leaving instances, found from their units: filter sglang_leaving_instances)."""
    last_good = (instance.get("files") or {}).get("last_good")
    unit = _read(last_good[0][1]) if last_good else None
    argv = exec_start(unit.decode(errors="replace")) if unit is not None else None
    if argv is None:
        return dict(instance)
    scheme = "https" if "--ssl-certfile" in argv else "http"
    urls = {key: urlsplit(instance[key])._replace(scheme=scheme).geturl() for key in ("url", "remote_url") if instance.get(key)}
    return {**instance, **urls}


# What a real run does with an instance, as check mode says it (check_mode_plan).
IN_PLACE = "update in place"
RESTART = "restart"
UNDECIDED = "restart or update in place (decided after the model's files are fetched)"


def without_exec_start(unit_text: str) -> list[str]:
    """The unit's lines but its ExecStart= line: what must stay the same for an update in place (a changed sandbox
    setting or limit takes effect only at a start)."""
    return [line for line in unit_text.splitlines() if not line.startswith("ExecStart=")]


def revision_candidate(instance: Mapping[str, Any], planned: Mapping[str, str | None] | None = None) -> tuple[str, str] | None:
    """(old model directory, new one) when the instance's new files differ from its last verified ones only in the
    model's revision directory (the unit's ExecStart=), None when they call for a restart. The new files are those on
    disk (written by this run), or in check mode, where nothing is written, `planned`: each file the run would
    change, with its content (None: a private file, the environment or key file, whose change restarts)."""
    planned = planned or {}
    texts: list[tuple[bytes | None, bytes | None]] = []
    for current, last_good in instance["files"]["last_good"]:
        if current in planned and planned[current] is None:
            return None
        new = str(planned[current]).encode() if current in planned else _read(current)
        texts.append((new, _read(last_good)))
    (new_unit, old_unit), others = texts[0], texts[1:]
    if new_unit is None or old_unit is None or any(new != old for new, old in others):
        return None
    new_text, old_text = new_unit.decode(), old_unit.decode()
    if without_exec_start(new_text) != without_exec_start(old_text):
        return None
    return revision_change(exec_start(old_text) or [], exec_start(new_text) or [])


def in_place_revision(instance: Mapping[str, Any]) -> dict[str, str] | None:
    """{'from': old dir, 'to': new dir, 'weight_version': the new revision} when the instance's new files (written,
    not yet running) differ from its last verified ones only in a revision of the same model whose layout is the
    same (the module's docstring); None when it must restart."""
    change = revision_candidate(instance)
    if change is None:
        return None
    old_layout, new_layout = model_layout(change[0]), model_layout(change[1])
    if old_layout is None or new_layout is None or old_layout != new_layout:
        return None
    return {"from": change[0], "to": change[1], "weight_version": os.path.basename(change[1].rstrip("/"))}


def check_mode_plan(instance: Mapping[str, Any], planned: Mapping[str, str | None]) -> str:
    """What a real run would do with the instance (IN_PLACE, RESTART or UNDECIDED), told in check mode from the files
    it would write (`planned`, revision_candidate) and the model directories on the host. The new revision's files
    are sent by the run itself: while its directory is missing, or a file of it is missing or cut short (the run
    sends it again), the answer waits for them (UNDECIDED)."""
    change = revision_candidate(instance, planned)
    if change is None:
        return RESTART
    old_layout = model_layout(change[0])
    if old_layout is None:
        return RESTART  # as in_place_revision: the running revision's own files are not whole
    new_layout = model_layout(change[1]) if os.path.isdir(change[1]) else None
    if new_layout is None:
        return UNDECIDED
    return IN_PLACE if new_layout == old_layout else RESTART
