"""Deploy's probe answered ahead (module_utils/probe_ahead.py): the probe keeps its request on the host, the next
gathering answers it as the probe would, and the probe's action uses that answer only for its very request."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.template import trust_as_template
from ansible_collections.sglang.fleet.plugins.action.sglang_instance_files import ActionModule
from ansible_collections.sglang.fleet.plugins.module_utils import probe_ahead
from ansible_collections.sglang.fleet.plugins.modules import sglang_instance_files as module
from ansible_collections.sglang.fleet.plugins.plugin_utils import probe_key
from test_instance_files import spec

KEY = bytes(range(32))
SECRET = '{"api_key": "sk-router-1"}\n'


def files_on_host(tmp_path: Path) -> dict[str, Path]:
    """A unit as planned, an environment file edited by hand, a key file with another mode, one missing."""
    tmp_path.mkdir()
    paths = {name: tmp_path / name for name in ("unit", "env", "keys", "missing")}
    paths["unit"].write_text("[Unit]\n")
    paths["unit"].chmod(0o640)
    paths["env"].write_text("A=hand edit\n")
    paths["env"].chmod(0o640)
    paths["keys"].write_text(SECRET)
    paths["keys"].chmod(0o644)
    return paths


def probe_args(paths: dict[str, Path], unit: str = "[Unit]\n") -> dict[str, Any]:
    """The module options of deploy's probe for `paths` (the key file's content private), as its action sends them."""
    return {
        "files": [],
        "private_contents": [SECRET],
        "requests": {
            "sglang_server": {
                "files": [spec(paths["unit"], unit), spec(paths["env"], "A=1\n"), spec(paths["missing"], "B=2\n")],
                "read": {"globs": [str(paths["unit"].parent / "u*")]},
            },
            "sglang_router": {"files": [{**spec(paths["keys"], ""), "content": None, "private": 0}]},
        },
    }


def probe(params: dict[str, Any], monkeypatch: Any) -> dict[str, Any]:
    """The probe module's result for `params` (check mode, as deploy's probe runs)."""
    returned: dict[str, Any] = {}
    fake = SimpleNamespace(
        check_mode=True,
        params={"read": None, "keep": None, **params},
        exit_json=lambda **result: returned.update(result),
        fail_json=lambda **result: pytest.fail(str(result)),
    )
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", lambda **_: fake)
    module.main()
    return returned


def without_diffs(answers: dict[str, Any]) -> dict[str, Any]:
    return {name: {**answer, "diff": []} for name, answer in answers.items()}


def test_a_kept_request_is_answered_as_the_probe_answers_it(tmp_path: Path, monkeypatch: Any) -> None:
    """Changed content, changed mode, a missing file, an unchanged private file and a read: the gathering's answer is
    the probe's, without its diffs."""
    paths = files_on_host(tmp_path / "host")
    kept = tmp_path / "home/.ansible/sglang.fleet/probe-request.json"
    probed = probe({**probe_args(paths), "keep": str(kept)}, monkeypatch)
    assert probed["answers"]["sglang_server"]["changed_paths"] == [str(paths["env"]), str(paths["missing"])]
    assert probed["answers"]["sglang_router"]["changed_paths"] == [str(paths["keys"])], "its mode differs"
    ahead = probe_ahead.answer_ahead(str(kept), KEY.hex())
    assert ahead["answers"] == without_diffs(probed["answers"])
    assert ahead["signature"] == probe_ahead.signature(KEY, kept.read_text())
    assert ahead["signature"] != probe_ahead.signature(bytes(32), kept.read_text()), "another key, another signature"


def test_a_request_is_kept_by_its_contents_sha256_for_its_user_alone_and_written_only_when_it_changes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    paths = files_on_host(tmp_path / "host")
    kept = tmp_path / "home/.ansible/sglang.fleet/probe-request.json"
    probe({**probe_args(paths), "keep": str(kept)}, monkeypatch)
    text = kept.read_text()
    assert "A=1" not in text and SECRET.strip() not in text.replace("\\", ""), "contents kept by their sha256 only"
    assert hashlib.sha256(SECRET.encode()).hexdigest() in text
    assert oct(kept.stat().st_mode & 0o777) == "0o600" and oct(kept.parent.stat().st_mode & 0o777) == "0o700"
    inode = kept.stat().st_ino
    probe({**probe_args(paths), "keep": str(kept)}, monkeypatch)
    assert kept.stat().st_ino == inode, "the same request is not written again"
    probe({**probe_args(paths, unit="[Unit]\nAfter=network.target\n"), "keep": str(kept)}, monkeypatch)
    assert kept.read_text() != text, "another request replaces it"
    assert [name for name in os.listdir(kept.parent) if name.startswith(".")] == [], "no temporary file is left"


def test_a_host_without_a_kept_request_or_with_one_it_cannot_answer_answers_nothing(tmp_path: Path) -> None:
    kept = tmp_path / "probe-request.json"
    assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}
    for text in ("not json", json.dumps({"sglang_server": {"files": [{"path": str(kept)}]}}), "[]"):  # another format
        kept.write_text(text)
        assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}, text
    unwritable = tmp_path / "file-not-folder"
    unwritable.write_text("")
    probe_ahead.keep(str(unwritable / "probe-request.json"), "{}")  # a cache: a failure to keep it is no error


def action(diff: bool = False) -> Any:
    return SimpleNamespace(_task=SimpleNamespace(diff=diff))


def test_the_probe_uses_the_answer_ahead_for_its_very_request_only(tmp_path: Path, monkeypatch: Any) -> None:
    paths = files_on_host(tmp_path / "host")
    kept = tmp_path / "probe-request.json"
    probed = probe({**probe_args(paths), "keep": str(kept)}, monkeypatch)
    ahead = probe_ahead.answer_ahead(str(kept), KEY.hex())
    monkeypatch.setattr(probe_key, "key", lambda: KEY)
    # As the action has them: rendered contents are Ansible's strings, which travel to the module as plain ones.
    args = probe_args(paths)
    args["private_contents"] = [trust_as_template(SECRET)]
    used = ActionModule.answered_ahead(action(), args, ahead)
    assert used is not None and used["answered_ahead"] and used["changed"]
    assert used["answers"] == without_diffs(probed["answers"])
    assert ActionModule.answered_ahead(action(), probe_args(paths, unit="[Unit]\nX=1\n"), ahead) is None, "another unit"
    changed_key = {**args, "private_contents": ['{"api_key": "sk-router-2"}\n']}
    assert ActionModule.answered_ahead(action(), changed_key, ahead) is None, "another private content"
    assert ActionModule.answered_ahead(action(diff=True), args, ahead) is None, "a diff is asked for: the module makes it"
    assert ActionModule.answered_ahead(action(), args, {}) is None, "nothing answered ahead"
    monkeypatch.setattr(probe_key, "key", lambda: bytes(32))
    assert ActionModule.answered_ahead(action(), args, ahead) is None, "signed with another key"


def test_the_probe_key_is_made_once_for_this_user_alone(tmp_path: Path) -> None:
    folder = tmp_path / "sglang.fleet"
    made = probe_key.key(folder)
    assert made is not None and len(made) == probe_key.SIZE and probe_key.key(folder) == made
    assert oct((folder / "probe-key").stat().st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(folder)) == ["probe-key"], "no partial file is left"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert probe_key.key(shared) is None, "a folder others can write keeps no key"
