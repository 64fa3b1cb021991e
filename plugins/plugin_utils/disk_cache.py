"""What the control node's caches of sglang.fleet share (template_cache, import_cache): a folder of its user's alone,
entries written whole, kept while runs read them."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

import ansible.release

KEEP_UNUSED_SECONDS = 30 * 24 * 3600
# An entry's time is refreshed when it is read, at most this often: read entries are kept, unused ones pruned.
REFRESH_SECONDS = 24 * 3600
PARTIAL = ".part"


def versioned(base: Path, *versions: str, format_: int) -> Path:
    """The folder under `base` for this Ansible, `versions` (what else an entry depends on), this Python (its cache tag
    and bytecode magic) and the entries' `format_`: `prune` removes every other `ansible-*` folder there."""
    python = (str(sys.implementation.cache_tag), importlib.util.MAGIC_NUMBER.hex())
    return base / "-".join(("ansible", ansible.release.__version__, *versions, *python, str(format_)))


def private(base: Path) -> bool:
    """Create `base` for this user alone; whether it is so (the caches hold what this process runs: a folder another
    user could write is not used)."""
    with contextlib.suppress(OSError):
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        status = base.stat()
    except OSError:
        return False
    return base.is_dir() and status.st_uid == os.geteuid() and status.st_mode & 0o022 == 0


def refresh(entry: BinaryIO) -> None:
    """Mark the open entry as read now, when it was last marked over REFRESH_SECONDS ago."""
    if time.time() - os.fstat(entry.fileno()).st_mtime > REFRESH_SECONDS:
        os.utime(entry.fileno())


def write(path: Path, data: bytes) -> None:
    """Write the entry whole or not at all, readable by its user alone (workers of a run may write one key at once); a
    failure leaves no entry."""
    partial = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(dir=path.parent, suffix=PARTIAL)
        partial = Path(name)
        with os.fdopen(descriptor, "wb") as entry:
            entry.write(data)
        partial.replace(path)
    except OSError:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()


def prune(base: Path, current: Path, now: float | None = None) -> int:
    """Remove the folders under `base` other than `current` (other versions), the entries not read for
    KEEP_UNUSED_SECONDS and the partial writes of workers that died (an hour old); returns the number of files removed."""
    now = time.time() if now is None else now
    removed = 0
    for folder in base.glob("ansible-*") if base.is_dir() else ():
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                age = now - entry.stat().st_mtime
                if folder != current or age > (3600 if entry.name.endswith(PARTIAL) else KEEP_UNUSED_SECONDS):
                    entry.unlink()
                    removed += 1
            except OSError:
                continue
        if folder != current:
            with contextlib.suppress(OSError):
                folder.rmdir()
    return removed
