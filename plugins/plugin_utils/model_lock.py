"""The model lock file on the control node (YAML in the inventory, written by playbooks/model_lock.yml): every selected
file's size and SHA-256 under its source's key, read, checked and written with stable text. The lower layer of
plugin_utils/model_source.py, which fetches what it records; never on a managed host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import re
import tempfile
from collections.abc import Mapping
from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.plugin_utils import safe_yaml

LOCK_PLAYBOOK = "playbooks/model_lock.yml"
LOCK_HEADER = f"""\
# Model weights pinned by content. Written by {LOCK_PLAYBOOK}; every deploy checks the files it fetches against it.
# Each key is a model source: <org>/<name>@<commit> for a Hub repository, <name>@<label> for a directory on the
# control node. Edit the source in the inventory and run {LOCK_PLAYBOOK} again rather than this file.
"""
SHA256 = re.compile(r"[0-9a-f]{64}")


class ModelSourceError(Exception):
    """An expected failure reading a source or the lock file (network, missing files, a malformed lock file)."""


def write_atomically(path: str, text: str) -> None:
    """Replaces the file at once: a reader sees the old or the new text, never a part (the mode of the old is kept)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


# The lock file


def _lock_document(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            document = safe_yaml.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as error:
        raise ModelSourceError(f"{path}: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, dict) or not isinstance(document.get("models", {}), dict):
        raise ModelSourceError(f"{path}: not a lock file (a mapping with a mapping `models`)")
    return document


def read_lock(path: str) -> dict[str, Any]:
    """The lock file's entries, source key -> {files: {name: {size, sha256}}}; empty when there is no lock file."""
    return dict(_lock_document(path).get("models") or {})


class _LockDumper(yaml.SafeDumper):
    """Block style, except one line per file: `name: {size: N, sha256: HEX}`."""


@dataclasses.dataclass(frozen=True)
class _FlowEntry:
    """A file's entry, dumped on one line with its keys in this order."""

    pairs: tuple[tuple[str, Any], ...]


def _represent_file(dumper: yaml.SafeDumper, entry: _FlowEntry) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", list(entry.pairs), flow_style=True)


_LockDumper.add_representer(_FlowEntry, _represent_file)


def _normal_files(files: Mapping[str, Mapping[str, Any]]) -> dict[str, _FlowEntry]:
    return {
        name: _FlowEntry((("size", int(files[name]["size"])), ("sha256", str(files[name]["sha256"])))) for name in sorted(files)
    }


def render_lock(models: Mapping[str, Mapping[str, Any]]) -> str:
    """The lock file's text: the header, then the entries by key, each file on one line, by name."""
    entries = {key: {"files": _normal_files(models[key].get("files") or {})} for key in sorted(models)}
    body = yaml.dump({"models": entries}, Dumper=_LockDumper, sort_keys=False, default_flow_style=False, width=1 << 16)
    return LOCK_HEADER + body


def write_lock(path: str, key: str, files: Mapping[str, Mapping[str, Any]], *, check_mode: bool = False) -> bool:
    """Records `files` under `key`, keeping the other entries; whether the file's text changed. The text is stable:
    sorted keys, one line per file, so the same files write the same bytes. `check_mode` reports without writing."""
    models = {**read_lock(path), key: {"files": dict(files)}}
    for other, entry in models.items():
        problems = lock_problems(entry.get("files") if isinstance(entry, Mapping) else entry)
        if problems:
            raise ModelSourceError(f"{path}: entry {other}: " + "; ".join(f"{name}: {why}" for name, why in problems.items()))
    text = render_lock(models)
    try:
        with open(path, encoding="utf-8") as handle:
            changed = handle.read() != text
    except FileNotFoundError:
        changed = True
    if changed and not check_mode:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        write_atomically(path, text)
    return changed


def lock_entry_text(files: Mapping[str, Mapping[str, Any]] | None) -> str:
    """One entry's files as the lock file writes them (for a diff); empty for none."""
    if files is None:
        return ""
    return yaml.dump({"files": _normal_files(files)}, Dumper=_LockDumper, sort_keys=False, width=1 << 16)


def lock_problems(files: Any) -> dict[str, str]:
    """What is wrong with a lock entry's files (a hand edit), by file name; empty when each has a size and SHA-256."""
    if not isinstance(files, Mapping):
        return {"files": f"not a mapping of file names to {{size, sha256}}: {files!r}"}
    problems = {}
    for name, entry in files.items():
        if not safe_name(str(name)):
            problems[str(name)] = "not a relative path inside the model (no '..', no leading '/')"
        elif not isinstance(entry, Mapping) or not isinstance(entry.get("size"), int):
            problems[str(name)] = f"the lock entry has no size: {entry!r}"
        elif not SHA256.fullmatch(str(entry.get("sha256", ""))):
            problems[str(name)] = f"the lock entry has no SHA-256 (64 lowercase hex digits): {entry.get('sha256')!r}"
    return problems


def safe_name(name: str) -> bool:
    """Whether a file name stays inside the directory it is joined to."""
    return bool(name) and posixpath.normpath(name) == name and not name.startswith(("/", "../")) and name != ".."
