"""The code of a collection's Python files, kept on disk by each file's text (plugins/plugin_utils/code_cache.py,
installed by the callback sglang.fleet.prefork): a file imported again in a new run is not compiled and runs the same
code, named by its own path; a changed file is compiled again; a damaged entry is compiled again; a file whose compile
warns is never kept and warns, or fails, as without the cache; the code is what Ansible's loader compiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.plugin_utils import code_cache
from fleet import fresh_python

# In a fresh interpreter, as a run's process: the collections under argv[1] on Ansible's collection loader, the cache
# installed under argv[2] (none for "-"); imports test.code's module_utils `first` and prints its value, the file its
# code names, how many files were compiled, and the code's bytes; or the error.
IMPORT = """
import builtins, json, marshal, sys
from pathlib import Path
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.utils.collection_loader import _collection_finder
from ansible_collections.sglang.fleet.plugins.plugin_utils import code_cache
compiled = []
compile_ = builtins.compile
def counting(source, filename, *args, **kwargs):
    compiled.append(filename)
    return compile_(source, filename, *args, **kwargs)
builtins.compile = counting
if sys.argv[2] != "-":
    code_cache.install(Path(sys.argv[2]))
try:
    from ansible_collections.test.code.plugins.module_utils import first
except SyntaxError as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error.msg}"}))
else:
    loader = first.__loader__
    print(json.dumps({"value": first.value, "file": first.value_file(), "compiled": [f for f in compiled if "test/code" in f],
                      "code": marshal.dumps(loader.get_code(first.__name__)).hex()}))
"""
FIRST = "ansible_collections/test/code/plugins/module_utils/first.py"


def collection(root: Path, value: str = "41 + 1") -> Path:
    """A collection test.code under `root` whose module_utils `first` sets `value` and tells the file its code names."""
    utils = root / "ansible_collections/test/code/plugins/module_utils"
    utils.mkdir(parents=True, exist_ok=True)
    (utils / "first.py").write_text(f"value = {value}\n\n\ndef value_file():\n    return value_file.__code__.co_filename\n")
    return root


def imported(collections: Path, cache: Path | str, *python_options: str) -> dict[str, Any]:
    answer: dict[str, Any] = fresh_python(IMPORT, str(collections), str(cache), options=python_options)
    return answer


def test_a_file_imported_again_is_not_compiled_and_runs_the_same_code(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    first = imported(collections, tmp_path / "cache")
    assert first["value"] == 42 and first["file"] == str(collections / FIRST)
    assert first["compiled"] == [str(collections / FIRST)]
    again = imported(collections, tmp_path / "cache")
    assert again == {**first, "compiled": []}
    assert imported(collections, "-") == first  # as Ansible's loader compiles it without the cache


def test_a_changed_file_is_compiled_again(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    imported(collections, tmp_path / "cache")
    collection(collections, value="43 + 1")
    changed = imported(collections, tmp_path / "cache")
    assert changed["value"] == 44 and changed["compiled"] == [str(collections / FIRST)]
    assert imported(collections, tmp_path / "cache")["compiled"] == []


def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections")
    first = imported(collections, tmp_path / "cache")
    for entry in (tmp_path / "cache").glob("ansible-*/*"):
        entry.write_bytes(entry.read_bytes()[:5])
    assert imported(collections, tmp_path / "cache") == first
    assert imported(collections, tmp_path / "cache")["compiled"] == []


def test_a_file_whose_compile_warns_is_never_kept_and_warns_or_fails_as_without_the_cache(tmp_path: Path) -> None:
    collections = collection(tmp_path / "collections", value='"\\d"')  # "\d": an invalid escape sequence
    first = imported(collections, tmp_path / "cache")
    assert first["value"] == "\\d"
    # Again, twice: once to see that it warns, once as Ansible's loader compiles it (its warning issued as filters say).
    assert imported(collections, tmp_path / "cache")["compiled"] == [str(collections / FIRST)] * 2
    strict = ("-W", "error::DeprecationWarning", "-W", "error::SyntaxWarning")  # an invalid escape warns with one of them
    refused = imported(collections, tmp_path / "cache", *strict)
    assert refused["error"].startswith("SyntaxError: invalid escape sequence")
    assert refused == imported(collections, "-", *strict)


def test_the_key_tells_apart_name_and_text() -> None:
    keys = {
        code_cache.key("/a/first.py", b"value = 1\n"),
        code_cache.key("/b/first.py", b"value = 1\n"),  # the code names its file
        code_cache.key("/a/first.py", "value = 1\n"),  # str: no coding line applies
        code_cache.key("/a/first.py", b"value = 2\n"),
    }
    assert len(keys) == 4
