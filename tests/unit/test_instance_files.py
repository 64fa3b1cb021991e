"""sglang_instance_files: one call writes only what differs, atomically, and tells the truth in check mode."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils.file_compare import compare_file
from ansible_collections.sglang.fleet.plugins.modules import sglang_instance_files as module

OWNER, GROUP = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def spec(path: Path, content: str, mode: str = "0640") -> dict[str, str]:
    return {"path": str(path), "content": content, "owner": OWNER, "group": GROUP, "mode": mode}


def test_a_new_file_is_written_with_its_mode_and_diffed(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.service"
    differs, diff = module.apply(spec(target, "[Unit]\n"), check_mode=False)
    assert differs and target.read_text() == "[Unit]\n" and oct(target.stat().st_mode & 0o777) == "0o640"
    assert diff == {"before_header": str(target), "after_header": str(target), "before": "", "after": "[Unit]\n"}


def test_the_same_content_and_mode_is_no_change(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.env"
    module.apply(spec(target, "A=1\n"), check_mode=False)
    before = target.stat().st_ino
    assert module.apply(spec(target, "A=1\n"), check_mode=False) == (False, None)
    assert target.stat().st_ino == before, "an unchanged file is not rewritten"


def test_a_mode_change_alone_is_a_change_without_a_content_diff(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.env"
    module.apply(spec(target, "A=1\n"), check_mode=False)
    assert module.apply(spec(target, "A=1\n", mode="0600"), check_mode=False) == (True, None)
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.service"
    target.write_text("hand edit\n")
    differs, diff = module.apply(spec(target, "[Unit]\n"), check_mode=True)
    assert differs and diff and diff["before"] == "hand edit\n" and diff["after"] == "[Unit]\n"
    assert target.read_text() == "hand edit\n"


def test_a_private_file_never_has_a_diff(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.yaml"
    differs, diff = module.apply({**spec(target, "api-key: sk-1\n"), "diff": False}, check_mode=False)
    assert differs and diff is None
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == [], "no temporary file is left"


def test_deploys_probe_answers_each_request_under_its_name_and_writes_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """The one call of deploy's probe: several roles' files compared (private contents by index) and reads made, each
    answered apart; in check mode no file is written."""
    unit, keys = tmp_path / "sglang-30000.service", tmp_path / "router.json"
    unit.write_text("hand edit\n")
    keys.write_text('{"api_key": "sk-1"}\n')
    keys.chmod(0o640)
    answers: dict[str, Any] = {}
    fake = SimpleNamespace(
        check_mode=True,
        params={
            "files": [],
            "read": None,
            "private_contents": ['{"api_key": "sk-1"}\n'],
            "requests": {
                "sglang_server": {"files": [spec(unit, "[Unit]\n")], "read": {"globs": [str(tmp_path / "*.service")]}},
                "sglang_router": {"files": [{**spec(keys, ""), "content": None, "private": 0}]},
            },
        },
        exit_json=lambda **result: answers.update(result),
        fail_json=lambda **result: pytest.fail(str(result)),
    )
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule", lambda **_: fake)
    module.main()
    server, router = answers["answers"]["sglang_server"], answers["answers"]["sglang_router"]
    assert server["changed_paths"] == [str(unit)] and server["read"]["found"] == {str(tmp_path / "*.service"): [str(unit)]}
    assert router["changed_paths"] == [] and "read" not in router, "the same private content: no change, nothing read"
    assert answers["changed"] is True and unit.read_text() == "hand edit\n", "check mode: reported, not written"


def test_an_account_that_does_not_exist_yet_is_a_change_in_check_mode_and_an_error_in_a_real_run(tmp_path: Path) -> None:
    """Check mode before the role creates its account: the file will change (its owner too, where it exists); a real
    run never writes a file for an owner that does not exist."""
    target = tmp_path / "sglang-30000.env"
    module.apply(spec(target, "A=1\n"), check_mode=False)
    absent = {**spec(target, "A=1\n"), "owner": "sglang-fleet-no-such-user"}
    found = compare_file(str(target), b"A=1\n", absent["owner"], GROUP, 0o640)
    assert (found.content_differs, found.attributes_differ, found.ids) == (False, True, None)
    assert module.apply(absent, check_mode=True) == (True, None)
    with pytest.raises(KeyError, match="sglang-fleet-no-such-user"):
        module.apply(absent, check_mode=False)
    new = tmp_path / "sglang-30001.env"
    found = compare_file(str(new), b"A=1\n", absent["owner"], GROUP, 0o640)
    assert (found.current, found.content_differs, found.attributes_differ) == (None, True, False)
    assert module.apply({**absent, "path": str(new)}, check_mode=True) == (True, {
        "before_header": str(new), "after_header": str(new), "before": "", "after": "A=1\n"
    })  # fmt: skip
    assert not new.exists()


def test_the_owner_or_group_alone_differing_is_a_change(tmp_path: Path) -> None:
    target = tmp_path / "sglang-30000.env"
    module.apply(spec(target, "A=1\n"), check_mode=False)
    other_group = next(group.gr_name for group in grp.getgrall() if group.gr_gid != os.getgid())
    found = compare_file(str(target), b"A=1\n", OWNER, other_group, 0o640)
    assert (found.content_differs, found.attributes_differ) == (False, True)
    assert not compare_file(str(target), b"A=1\n", OWNER, GROUP, 0o640).differs
