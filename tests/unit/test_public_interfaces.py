"""The collection uses ansible-core's public interfaces only: no module of ansible's `_internal` package (or any other
underscored module of `ansible`), no underscored name imported from `ansible.*` and no underscored attribute reached through one
(dunders such as `__version__` are public). Every Python file of the collection's plugins, its roles and playbooks and
the test helpers they share is walked with `ast`.

A line may use one only where no public interface exists and the fallback, plain Ansible behaviour, is tested: its
comment says so as `# no public interface: <what is missing>; fallback tested by <tests/path.py>::<test name>`, and
that test must exist. No line does today.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import ROOT

FOLDERS = ("plugins", "roles", "playbooks", "tests")
ALLOWED = re.compile(r"#\s*no public interface:\s*[^;]+;\s*fallback tested by\s+(\S+\.py)::(\w+)")


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything else (a call, a subscript...)."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def private_uses(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each use of a private interface of ansible-core in `source`."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # a local name -> the ansible path it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ansible" or alias.name.startswith("ansible."):
                    if any(private(part) for part in alias.name.split(".")):
                        yield node.lineno, f"import {alias.name}"
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ansible":
            module = str(node.module)
            module_is_private = any(private(part) for part in module.split("."))
            if module_is_private:
                yield node.lineno, f"from {module} import ..."
            for alias in node.names:
                if private(alias.name) and not module_is_private:
                    yield node.lineno, f"from {module} import {alias.name}"
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:  # a whole path, once
            path = dotted(node)
            if path and path[0] in bound and any(private(part) for part in path[1:]):
                yield node.lineno, ".".join([bound[path[0]], *path[1:]])
        elif isinstance(node, ast.Call):  # getattr(owner, "_name"), setattr(...), a helper given both
            owners = [path for path in map(dotted, node.args) if path and path[0] in bound]
            names = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            for owner in owners:
                for name in filter(private, names):
                    yield node.lineno, f"{'.'.join([bound[owner[0]], *owner[1:]])} and {name!r}"


def collection_files() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py") if "recordings" not in path.parts)


def violations(path: Path) -> list[str]:
    """Each private use in `path` that no allowed comment covers, as `path:line: what`."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for line, what in private_uses(source):
        allowed = ALLOWED.search(lines[line - 1])
        if allowed and fallback_exists(allowed.group(1), allowed.group(2)):
            continue
        found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {what}")
    return found


def fallback_exists(test_file: str, test_name: str) -> bool:
    path = ROOT / test_file
    return path.is_file() and re.search(rf"^def {re.escape(test_name)}\(", path.read_text(), re.MULTILINE) is not None


def test_the_collection_uses_no_private_interface_of_ansible_core() -> None:
    files = collection_files()
    assert any(path.name == "sglang_instance_files.py" for path in files) and len(files) > 100
    found = [violation for path in files for violation in violations(path)]
    assert found == [], "\n".join(found)


# Spelled in parts, so that a plain search of the checkout for private imports finds none here.
INTERNAL, TEMPLATE_VARS = "ansible." + "_internal", "_" + "template_vars"
PLANTED = {
    f"from {INTERNAL}._templating import {TEMPLATE_VARS}\n": f"from {INTERNAL}._templating import ...",
    f"import {INTERNAL}._templating._jinja_bits as bits\n": f"import {INTERNAL}._templating._jinja_bits",
    f"from ansible.template import {TEMPLATE_VARS}\n": f"from ansible.template import {TEMPLATE_VARS}",
    "from ansible.executor import module_common\nmodule_common._compile_module_ast = None\n": (
        "ansible.executor.module_common._compile_module_ast"
    ),
    "import ansible.release\nprint(ansible.release._private)\n": "ansible.release._private",
    "from ansible import constants as C\nx = getattr(C.config, '_base_defs')\n": "ansible.constants.config and '_base_defs'",
    "from ansible.executor import module_common\nreplace(module_common, '_compile_module_ast', wrap)\n": (
        "ansible.executor.module_common and '_compile_module_ast'"
    ),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_a_planted_private_use_is_found(tmp_path: Path, planted: str) -> None:
    bad = tmp_path / "plugins/filter/bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(f"from __future__ import annotations\n\n{planted}")
    [violation] = violations(bad)
    assert violation.endswith(PLANTED[planted]), violation


def test_public_names_and_dunders_pass_and_an_allowed_line_needs_its_tested_fallback(tmp_path: Path) -> None:
    path = tmp_path / "ok.py"
    path.write_text(
        "import ansible.release\nfrom ansible.template import generate_ansible_template_vars\n"
        "from ansible.plugins.action import ActionBase\nv = ansible.release.__version__\n"
        "class A(ActionBase):\n    def run(self):\n        return self._execute_module()\n"
    )
    assert violations(path) == []
    this = "tests/unit/test_public_interfaces.py"
    allowed = f"from ansible import {'_'}x  # no public interface: x; fallback tested by {this}::"
    path.write_text(allowed + "test_a_planted_private_use_is_found\n")
    assert violations(path) == []
    path.write_text(allowed + "test_that_does_not_exist\n")
    assert len(violations(path)) == 1
