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


def kept_at(kept: Path, args: dict[str, Any], monkeypatch: Any) -> dict[str, Any]:
    """`args` with the module's `keep`: at `kept`, signed as the action signs them (under KEY)."""
    monkeypatch.setattr(probe_key, "key", lambda: KEY)
    return {**args, "keep": {"path": str(kept), "signature": ActionModule.kept_signature(args)}}


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
    probed = probe(kept_at(kept, probe_args(paths), monkeypatch), monkeypatch)
    assert probed["answers"]["sglang_server"]["changed_paths"] == [str(paths["env"]), str(paths["missing"])]
    assert probed["answers"]["sglang_router"]["changed_paths"] == [str(paths["keys"])], "its mode differs"
    ahead = probe_ahead.answer_ahead(str(kept), KEY.hex())
    assert ahead["answers"] == without_diffs(probed["answers"])
    assert ahead["signature"] == kept.read_text().partition("\n")[0] == ActionModule.kept_signature(probe_args(paths))
    assert probe_ahead.answer_ahead(str(kept), bytes(32).hex()) == {}, "signed under another key: not made"


def test_a_request_is_kept_by_its_contents_sha256_for_its_user_alone_and_written_only_when_it_changes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    paths = files_on_host(tmp_path / "host")
    kept = tmp_path / "home/.ansible/sglang.fleet/probe-request.json"
    probe(kept_at(kept, probe_args(paths), monkeypatch), monkeypatch)
    text = kept.read_text()
    assert "A=1" not in text and SECRET.strip() not in text.replace("\\", ""), "contents kept by their sha256 only"
    assert hashlib.sha256(SECRET.encode()).hexdigest() in text
    assert oct(kept.stat().st_mode & 0o777) == "0o600" and oct(kept.parent.stat().st_mode & 0o777) == "0o700"
    inode = kept.stat().st_ino
    probe(kept_at(kept, probe_args(paths), monkeypatch), monkeypatch)
    assert kept.stat().st_ino == inode, "the same request is not written again"
    probe(kept_at(kept, probe_args(paths, unit="[Unit]\nAfter=network.target\n"), monkeypatch), monkeypatch)
    assert kept.read_text() != text, "another request replaces it"
    assert [name for name in os.listdir(kept.parent) if name.startswith(".")] == [], "no temporary file is left"


def test_a_host_without_a_kept_request_or_with_one_it_cannot_answer_answers_nothing(tmp_path: Path) -> None:
    kept = tmp_path / "probe-request.json"
    assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}
    for text in ("not json", json.dumps({"sglang_server": {"files": [{"path": str(kept)}]}}), "[]"):  # another format
        module.keep(str(kept), probe_ahead.kept_file(text, probe_ahead.signature(KEY, text)))
        assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}, text
    unwritable = tmp_path / "file-not-folder"
    unwritable.write_text("")
    module.keep(str(unwritable / "probe-request.json"), "{}")  # a cache: a failure to keep it is no error


def test_a_kept_request_is_made_only_when_the_control_node_signed_it_and_only_this_user_could_write_it(
    tmp_path: Path,
) -> None:
    """A request planted or edited on the host (its commands would run as the module's user) is never made."""
    ran = tmp_path / "ran"
    planted = json.dumps({"sglang_venv": {"files": [], "read": {"commands": [{"argv": ["touch", str(ran)]}]}}})
    kept = tmp_path / "probe-request.json"
    module.keep(str(kept), probe_ahead.kept_file(planted, "0" * 64))
    assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}, "unsigned"
    kept.write_text(probe_ahead.kept_file(planted, probe_ahead.signature(KEY, planted)))
    for mode in (0o644, 0o620):
        kept.chmod(mode)
        assert probe_ahead.answer_ahead(str(kept), KEY.hex()) == {}, f"others may read or write it ({oct(mode)})"
    kept.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(kept)
    assert probe_ahead.answer_ahead(str(link), KEY.hex()) == {}, "a link"
    assert not ran.exists()
    assert probe_ahead.answer_ahead(str(kept), KEY.hex())["answers"]["sglang_venv"]["read"] is not None
    assert ran.exists(), "signed, this user's alone: made"


def action(diff: bool = False) -> Any:
    return SimpleNamespace(_task=SimpleNamespace(diff=diff))


def test_the_probe_uses_the_answer_ahead_for_its_very_request_only(tmp_path: Path, monkeypatch: Any) -> None:
    paths = files_on_host(tmp_path / "host")
    kept = tmp_path / "probe-request.json"
    probed = probe(kept_at(kept, probe_args(paths), monkeypatch), monkeypatch)
    ahead = probe_ahead.answer_ahead(str(kept), KEY.hex())
    # As the action has them: rendered contents are Ansible's strings, which travel to the module as plain ones.
    args = probe_args(paths)
    args["private_contents"] = [trust_as_template(SECRET)]

    def used(args: dict[str, Any], diff: bool = False, answer: Any = ahead) -> Any:
        return ActionModule.answered_ahead(action(diff), ActionModule.kept_signature(args), answer, args["private_contents"])

    assert used(args) == {
        "changed": True, "changed_paths": [], "diff": [], "answers": without_diffs(probed["answers"]), "answered_ahead": True,
    }  # fmt: skip
    assert used(probe_args(paths, unit="[Unit]\nX=1\n")) is None, "another unit"
    assert used({**args, "private_contents": ['{"api_key": "sk-router-2"}\n']}) is None, "another private content"
    assert used(args, diff=True) is None, "a diff is asked for: the module makes it"
    assert used(args, answer={}) is None, "nothing answered ahead"
    monkeypatch.setattr(probe_key, "key", lambda: bytes(32))
    assert used(args) is None, "signed with another key"


def test_an_answer_ahead_is_masked_as_the_module_masks_its_result(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(probe_key, "key", lambda: KEY)
    args = probe_args(files_on_host(tmp_path / "host"))
    kept = ActionModule.kept_signature(args)
    leaky = {"signature": kept, "answers": {"sglang_router": {"changed_paths": [], "routers": {"u": SECRET}}}}
    used = ActionModule.answered_ahead(action(), kept, leaky, args["private_contents"])
    assert SECRET not in json.dumps(used), used


def test_the_probe_key_is_made_once_for_this_user_alone(tmp_path: Path) -> None:
    folder = tmp_path / "sglang.fleet"
    made = probe_key.key(folder)
    assert made is not None and len(made) == probe_key.SIZE and probe_key.key(folder) == made
    assert oct((folder / "probe-key").stat().st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(folder)) == ["probe-key"], "no partial file is left"
    (folder / "probe-key").write_bytes(made[:5])  # cut short by a crash
    again = probe_key.key(folder)
    assert again is not None and len(again) == probe_key.SIZE and again != made and probe_key.key(folder) == again
    assert sorted(os.listdir(folder)) == ["probe-key"]
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert probe_key.key(shared) is None, "a folder others can write keeps no key"
