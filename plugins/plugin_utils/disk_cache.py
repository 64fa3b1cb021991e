"""What the control node's caches of sglang.fleet share (template_cache, import_cache, code_cache): a folder of its
user's alone, entries named by what they were made from, written whole, kept while runs read them."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import ansible.release

KEEP_UNUSED_SECONDS = 30 * 24 * 3600
# An entry's time is refreshed when it is read, at most this often: read entries are kept, unused ones pruned.
REFRESH_SECONDS = 24 * 3600
PARTIAL = ".part"

Result = TypeVar("Result")


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


def key(fields: tuple[object, ...], text: str | bytes) -> str:
    """An entry's name: the sha256 of `fields` (what else it depends on, by their repr) and of `text` (a str as
    UTF-8, unpaired surrogates too)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(repr(fields).encode() + b"\0" + data).hexdigest()


def load(path: Path) -> Any:
    """What the entry at `path` holds (marshal), marked as read; None when it is missing or not whole."""
    try:
        with path.open("rb") as entry:
            value = marshal.load(entry)
            refresh(entry)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return value


def unless_warned(make: Callable[[], Result]) -> tuple[Result, bool]:
    """What `make` makes, and whether making it warned. Then (also when it failed after a warning) it is made again
    outside the record, so its warnings are issued, or raised, as the warning filters say; what warned is never kept."""
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter("always")
        try:
            made = make()
        except Exception:
            if not issued:
                raise
    if issued:
        return make(), True
    return made, False


def replace(owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
    """Make `owner`.`name` what `wrap` makes of its original: Ansible's own, also when a cache replaced it before (the
    replacement keeps it as `uncached`, for `restore`)."""
    current = getattr(owner, name)
    original = getattr(current, "uncached", current)
    replacement = wrap(original)
    replacement.uncached = original
    setattr(owner, name, replacement)


def restore(owner: Any, name: str) -> None:
    """Give `owner`.`name` back its original when `replace` replaced it."""
    original = getattr(getattr(owner, name), "uncached", None)
    if original is not None:
        setattr(owner, name, original)


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
