"""The code of the collections' Python files, compiled once and kept on the control node's disk by each file's text.

Ansible's collection loader compiles a collection's file from its text each time a run imports it, and keeps nothing
(Python's own import keeps bytecode in __pycache__; Ansible's loader does not): on the sandbox every run compiled 42
files of this collection, about 40 ms before its first task. Here the code object is kept, keyed by the file's name
(the code's file name, in its tracebacks) and text (sha256), in the folder of this Ansible (its loader's compile) and
Python (its bytecode magic). The file is read on every import as before, so a changed file is compiled again. A text
whose compile warns (an invalid escape sequence, say) is never kept, so its warnings are issued, or raised, on every
run as without the cache.
"""

from __future__ import annotations

import functools
import marshal
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionPkgLoaderBase
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache

FORMAT = 1


def folder_for(base: Path) -> Path:
    """The folder of this Ansible and Python under `base`."""
    return disk_cache.versioned(base, format_=FORMAT)


def key(filename: str, source: str | bytes) -> str:
    return disk_cache.key((filename, type(source).__name__), source)


def read(path: Path) -> CodeType | None:
    """The entry at `path` when it exists and is whole."""
    code = disk_cache.load(path)
    return code if isinstance(code, CodeType) else None


def compiled(source: str | bytes, filename: str) -> tuple[CodeType, bool]:
    """The code of `source` as Ansible's loader compiles it, and whether compiling it warned (disk_cache.unless_warned)."""
    return disk_cache.unless_warned(
        lambda: compile(source=source, filename=filename, mode="exec", flags=0, dont_inherit=True)
    )


def caching(get_code: Callable[..., Any], folder: Path) -> Callable[..., Any]:
    """`get_code` (the collection loader's) reading the code of a file's text from `folder` when there, written there
    when not."""

    @functools.wraps(get_code)
    def get_code_cached(self: Any, fullname: str) -> Any:
        if self._compiled_code:
            return self._compiled_code
        filename = self.get_filename(fullname) or "<string>"
        source = self.get_source(fullname)
        if source is None:  # a synthetic package, which has no code (as Ansible's loader answers)
            return None
        path = folder / key(filename, source)
        code = read(path)
        if code is None:
            code, warned = compiled(source, filename)
            if not warned:
                disk_cache.write(path, marshal.dumps(code))
        self._compiled_code = code
        return code

    return get_code_cached


def install(base: Path) -> Path:
    """Make the collection loader, in this process and those it forks, read the code of each file it imports from the
    cache under `base`; returns the folder used. Installing again changes only the folder."""
    folder = folder_for(base)
    disk_cache.replace(_AnsibleCollectionPkgLoaderBase, "get_code", lambda get_code: caching(get_code, folder))
    return folder


def uninstall() -> None:
    disk_cache.restore(_AnsibleCollectionPkgLoaderBase, "get_code")


def prune(base: Path, now: float | None = None) -> int:
    """Remove the entries no run read for a month, and the folders of other versions (disk_cache.prune)."""
    return disk_cache.prune(base, folder_for(base), now)
