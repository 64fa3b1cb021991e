"""The simulator owns its model of SGLang: nothing under simulator/ links to, imports or reads the
product's code or data (plugins/, roles/). What both need to know of a release (its flags,
architectures, ...) each reads from its own copy of one table extracted from the real wheel, and
the two copies are the same bytes."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = ROOT / "simulator"
PRODUCT_MODULES = ("ansible_collections", "plugins", "roles", "ansible")
PRODUCT_PATH = re.compile(r"(^|[/\"'])(plugins|roles)/")


def simulator_files() -> list[Path]:
    found: list[Path] = []
    for directory, folders, files in os.walk(SIMULATOR):
        folders[:] = [
            name
            for name in folders
            if name not in ("__pycache__", ".venv", "build") and not name.endswith(".egg-info")
        ]
        found.extend(Path(directory) / name for name in [*folders, *files])
    return found


def test_nothing_under_simulator_is_a_link() -> None:
    links = [str(path.relative_to(ROOT)) for path in simulator_files() if path.is_symlink()]
    assert links == []


@pytest.mark.parametrize(
    "path", sorted(str(p.relative_to(ROOT)) for p in simulator_files() if p.suffix == ".py"), ids=lambda p: p
)
def test_no_python_file_imports_or_reads_the_product(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:  # relative imports stay inside the package
            imported.append(node.module or "")
    assert [name for name in imported if name.split(".")[0] in PRODUCT_MODULES] == []
    strings = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    # Docstrings may name the product's files; code may not open one (a path into plugins/ or roles/).
    docstrings = {
        ast.get_docstring(node, clean=False)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    assert [text for text in strings if text not in docstrings and PRODUCT_PATH.search(text)] == []


def test_the_installed_package_resolves_inside_simulator() -> None:
    spec = importlib.util.find_spec("sglang_simulator")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().is_relative_to(SIMULATOR.resolve())


@pytest.mark.parametrize("version", [f"0.5.{n}" for n in range(17, 24)])
def test_both_copies_of_a_releases_table_are_the_extractors_same_bytes(version: str) -> None:
    simulators = SIMULATOR / f"src/sglang_simulator/data/sglang-{version}.json"
    products = ROOT / f"roles/sglang_plan/files/sglang-{version}.json"
    assert not simulators.is_symlink() and not products.is_symlink()
    assert simulators.read_bytes() == products.read_bytes(), (
        "run scripts/extract_sglang_facts.py: it writes both"
    )
    table = json.loads(simulators.read_text())
    assert table["sglang_version"] == version
    assert table["source"].startswith(
        f"Extracted by scripts/extract_sglang_facts.py from the installed sglang {version} wheel"
    )
    extractor = (ROOT / "scripts/extract_sglang_facts.py").read_text()
    assert (
        '"simulator" / "src" / "sglang_simulator" / "data"' in extractor
        and "for out in table_paths(" in extractor
    )
