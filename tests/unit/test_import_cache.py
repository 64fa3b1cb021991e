"""What each file of a module's payload imports, kept on disk by its text (plugins/plugin_utils/import_cache.py, installed
by the callback sglang.fleet.prefork): a payload built again parses nothing and holds the same files; a file whose text
changed is parsed again and what it now imports is in the payload; a damaged entry is parsed again; a syntax error is
Ansible's own error; the key tells apart what Python or Ansible would scan differently."""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.plugin_utils import import_cache
from fleet import fresh_python

# In a fresh interpreter, as a run's process: Ansible's payload builder (recursive_finder) for the module test.imports.probe
# of the collections under argv[1], the cache installed under argv[2] (none for "-"). Prints the files in the payload and how many
# files were parsed, or Ansible's error.
BUILD_PAYLOAD = """
import datetime, io, json, sys, zipfile
from pathlib import Path
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible._internal._ansiballz import _builder
from ansible._internal._datatag._tags import Origin
from ansible.errors import AnsibleError
from ansible.executor import module_common
from ansible_collections.sglang.fleet.plugins.plugin_utils import import_cache
parsed = []
parse = module_common._compile_module_ast
def counting(name, source):
    parsed.append(name)
    return parse(name, source)
module_common._compile_module_ast = counting
if sys.argv[2] != "-":
    import_cache.install(Path(sys.argv[2]))
module = Path(sys.argv[1], "ansible_collections/test/imports/plugins/modules/probe.py")
payload = zipfile.ZipFile(io.BytesIO(), mode="w")
try:
    module_common.recursive_finder("probe", "ansible_collections.test.imports.plugins.modules.probe",
                                   Origin(path=str(module)).tag(module.read_bytes()), payload,
                                   datetime.datetime.now(datetime.timezone.utc), _builder.ExtensionManager.create(task_vars={}))
except AnsibleError as error:
    print(json.dumps({"error": str(error).splitlines()[0]}))
else:
    print(json.dumps({"files": sorted(payload.namelist()), "parsed": len(parsed)}))
"""


def collection(root: Path, *, first_imports_second: bool = False, broken: bool = False, warns: bool = False) -> Path:
    """A collection test.imports under `root`: module probe imports module_utils first (which may import second)."""
    utils = root / "ansible_collections/test/imports/plugins/module_utils"
    modules = root / "ansible_collections/test/imports/plugins/modules"
    utils.mkdir(parents=True, exist_ok=True)
    modules.mkdir(parents=True, exist_ok=True)
    (modules / "probe.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible_collections.test.imports.plugins.module_utils.first import value\n"
    )
    second = "from ansible_collections.test.imports.plugins.module_utils.second import other\n"
    value = "value = (\n" if broken else 'value = "\\d"\n' if warns else "value = 1\n"  # "\d": an invalid escape
    (utils / "first.py").write_text((second if first_imports_second else "") + value)
    (utils / "second.py").write_text("other = 2\n")
    return root


def build(collections: Path, cache: Path | str, *python_options: str) -> dict[str, Any]:
    answer: dict[str, Any] = fresh_python(BUILD_PAYLOAD, str(collections), str(cache), options=python_options)
    return answer


FIRST = "ansible_collections/test/imports/plugins/module_utils/first.py"
SECOND = "ansible_collections/test/imports/plugins/module_utils/second.py"


def test_a_payload_built_again_parses_nothing_and_holds_the_same_files(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    first = build(collections, tmp_path / "cache")
    assert FIRST in first["files"] and SECOND not in first["files"]
    assert first["parsed"] > 10  # the module, its module_utils and Ansible's own (basic and what it imports)
    assert build(collections, tmp_path / "cache") == {"files": first["files"], "parsed": 0}
    assert build(collections, "-") == first  # as Ansible builds it without the cache


def test_a_file_whose_text_changed_is_parsed_again_and_what_it_imports_now_is_sent(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    build(collections, tmp_path / "cache")
    collection(collections, first_imports_second=True)
    changed = build(collections, tmp_path / "cache")
    assert SECOND in changed["files"]
    assert changed["parsed"] == 2  # first.py (new text) and second.py (new file); nothing else
    assert build(collections, tmp_path / "cache") == {"files": changed["files"], "parsed": 0}


def test_a_damaged_entry_is_parsed_again(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    first = build(collections, tmp_path / "cache")
    for entry in (tmp_path / "cache").glob("ansible-*/*"):
        entry.write_bytes(entry.read_bytes()[:5])
    assert build(collections, tmp_path / "cache") == first
    assert build(collections, tmp_path / "cache")["parsed"] == 0


def test_a_syntax_error_is_ansible_s_own_error(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections", broken=True)
    error = build(collections, tmp_path / "cache")
    assert error["error"].startswith("Unable to compile 'ansible_collections.test.imports.plugins.module_utils.first': ")
    assert build(collections, tmp_path / "cache") == build(collections, "-") == error


def test_a_file_whose_parse_warns_is_never_kept_and_warns_or_fails_as_without_the_cache(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections", warns=True)
    first = build(collections, tmp_path / "cache")
    assert FIRST in first["files"]
    # first.py again, twice: once to see that it warns, once as Ansible parses it (its warning issued as the filters say)
    assert build(collections, tmp_path / "cache") == {"files": first["files"], "parsed": 2}
    strict = ("-W", "error::DeprecationWarning", "-W", "error::SyntaxWarning")  # an invalid escape warns with one of them
    refused = build(collections, tmp_path / "cache", *strict)
    assert refused["error"].startswith("Unable to compile 'ansible_collections.test.imports.plugins.module_utils.first': ")
    assert refused == build(collections, "-", *strict)


def test_a_copy_of_a_source_is_not_parsed() -> None:
    parsed = []

    def parse(name: str, text: Any) -> ast.Module:
        parsed.append(name)
        return ast.Module(body=[], type_ignores=[])

    source = import_cache.Source(parse, "a", b"value = 1\n")
    assert copy.copy(source).text == b"value = 1\n"
    assert parsed == []


def test_the_key_tells_apart_name_package_and_text_type() -> None:
    keys = {
        import_cache.key("ansible.module_utils.a", False, b"import os\n"),
        import_cache.key("ansible.module_utils.b", False, b"import os\n"),
        import_cache.key("ansible.module_utils.a", True, b"import os\n"),
        import_cache.key("ansible.module_utils.a", False, "import os\n"),  # str: no coding line applies
        import_cache.key("ansible.module_utils.a", False, b"import sys\n"),
    }
    assert len(keys) == 5
