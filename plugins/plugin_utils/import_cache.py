"""What each Python file of a module's payload imports, kept on the control node's disk by the file's text.

Once per run for each module a play calls, Ansible builds the module's payload (AnsiballZ): it parses the module and
every module_utils file it imports, and what those import, to find the next ones. On the sandbox that is 135 files for
the plan's facts module, a quarter of a second before the first host gets its call. What one file imports follows from
its text, its name and whether it is a package's __init__ (with Ansible's and Python's versions, part of the folder):
that answer is what is kept, by the text's sha256. Everything else stays Ansible's own work on every run: where each
import is found, which files are read, what the payload holds. A text is parsed only when no answer is kept for it
(and the module itself when Ansible's experimental module METADATA is on: it reads the tree). A text whose parse warns
(an invalid escape sequence, say) is never kept, so its warnings are issued, or raised, on every run as without the
cache.
"""

from __future__ import annotations

import ast
import functools
import marshal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible.executor import module_common
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache

FORMAT = 1

Imports = tuple[list[tuple[str, ...]], list[tuple[str, ...]]]  # (every import of module_utils, the optional ones)


def folder_for(base: Path) -> Path:
    """The folder of this Ansible (its import finder) and Python (its parser) under `base`."""
    return disk_cache.versioned(base, format_=FORMAT)


class Source:
    """What Ansible's parse of a payload file returns here: the file's text, parsed only when something reads the tree
    (a file whose imports are kept never is; its syntax errors are Ansible's, raised as it parses)."""

    OWN = frozenset({"parse", "name", "text", "parsed", "warned"})  # before __init__ (a copy): not the tree's

    def __init__(self, parse: Callable[[str, Any], ast.Module], name: str, text: str | bytes) -> None:
        self.parse = parse
        self.name = name
        self.text = text
        self.parsed: ast.Module | None = None
        self.warned = False  # whether parsing it issued a warning (then it is not kept)

    @property
    def tree(self) -> ast.Module:
        if self.parsed is None:
            self.parsed = self.parsed_as_ansible_parses()
        return self.parsed

    def parsed_as_ansible_parses(self) -> ast.Module:
        """The tree; a text whose parse warns is parsed again as Ansible parses it, for its warnings to be issued, or
        raised, as the warning filters say (and marked `warned`)."""
        tree, self.warned = disk_cache.unless_warned(lambda: self.parse(self.name, self.text))
        return tree

    def __getattr__(self, attribute: str) -> Any:  # Ansible reads the module's METADATA from the tree's body
        if attribute.startswith("__") or attribute in self.OWN:
            raise AttributeError(attribute)
        return getattr(self.tree, attribute)


def key(module_fqn: str, is_pkg_init: bool, text: str | bytes) -> str:
    # Python decodes text given as bytes by its coding line, text given as str as it is: their type is part of the key.
    return disk_cache.key((module_fqn, bool(is_pkg_init), type(text).__name__), text)


def names(value: object) -> list[tuple[str, ...]] | None:
    """`value` when it is a list of dotted names as tuples of strings, else None."""
    if isinstance(value, list) and all(isinstance(name, tuple) and all(isinstance(part, str) for part in name) for name in value):
        return value
    return None


def read(path: Path) -> Imports | None:
    """The entry at `path` when it exists and is whole."""
    try:
        every, optional = disk_cache.load(path)
    except (TypeError, ValueError):  # none, or not a pair
        return None
    every, optional = names(every), names(optional)
    return None if every is None or optional is None else (every, optional)


def caching(finder_init: Callable[..., None], folder: Path) -> Callable[..., None]:
    """`finder_init` (ModuleDepFinder.__init__) answering from `folder` for a Source whose text it has seen."""

    @functools.wraps(finder_init)
    def init(self: Any, module_fqn: str, tree: Any, is_pkg_init: bool = False, *args: Any, **kwargs: Any) -> None:
        if not isinstance(tree, Source):
            finder_init(self, module_fqn, tree, is_pkg_init, *args, **kwargs)
            return
        path = folder / key(module_fqn, is_pkg_init, tree.text)
        kept = read(path)
        if kept is None:
            finder_init(self, module_fqn, tree.tree, is_pkg_init, *args, **kwargs)
            if not tree.warned:
                disk_cache.write(path, marshal.dumps((sorted(self.submodules), sorted(self.optional_imports))))
            return
        # Ansible's own initialisation, on a tree with no statements; then what the file's text imports.
        finder_init(self, module_fqn, ast.Module(body=[], type_ignores=[]), is_pkg_init, *args, **kwargs)
        self.submodules, self.optional_imports = set(kept[0]), set(kept[1])

    return init


def sources(parse: Callable[[str, Any], ast.Module]) -> Callable[[str, str | bytes], Source]:
    """Ansible's parse of a payload file (`parse`, module_common._compile_module_ast) answering a Source."""

    def source(module_name: str, source_code: str | bytes) -> Source:
        return Source(parse, module_name, source_code)

    return source


def install(base: Path) -> Path:
    """Make Ansible's payload builder, in this process and those it forks, read what each file imports from the cache
    under `base`; returns the folder used. Installing again changes only the folder."""
    folder = folder_for(base)
    disk_cache.replace(module_common, "_compile_module_ast", sources)
    disk_cache.replace(module_common.ModuleDepFinder, "__init__", lambda finder_init: caching(finder_init, folder))
    return folder


def uninstall() -> None:
    disk_cache.restore(module_common, "_compile_module_ast")
    disk_cache.restore(module_common.ModuleDepFinder, "__init__")


def prune(base: Path, now: float | None = None) -> int:
    """Remove the entries no run read for a month, and the folders of other versions (disk_cache.prune)."""
    return disk_cache.prune(base, folder_for(base), now)
