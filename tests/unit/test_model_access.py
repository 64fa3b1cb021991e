"""The model facts' readability check: the model as the servers' account (not root) sees it, and the plan's lines."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import model_facts as module


def stat_of(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/models/Qwen3.6-27B", "ProtectHome=yes hides /home"),
        ("/home", "ProtectHome=yes hides /home"),
        ("/root/models/m", "ProtectHome=yes hides /root"),
        ("/run/user/1000/m", "ProtectHome=yes hides /run/user"),
        ("/tmp/models/m", "PrivateTmp=yes hides /tmp"),
        ("/var/tmp/m", "PrivateTmp=yes hides /var/tmp"),
        ("/srv/models/Qwen3.6-27B", None),
        ("/homework/models/m", None),
        ("/srv/home/m", None),
    ],
)
def test_paths_the_unit_hides(path: str, expected: str | None) -> None:
    assert module.hidden_by(path) == expected


def test_a_symlink_into_home_is_hidden_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "model"
    link.symlink_to("/home/someone/models/m")
    monkeypatch.setattr(module, "HIDDEN_PREFIXES", (("/home", "ProtectHome=yes"),))
    assert module.hidden_by(str(link)) == "ProtectHome=yes hides /home"


@pytest.mark.parametrize(
    ("mode", "owner", "group", "uid", "gids", "want", "allowed"),
    [
        (0o600, 999, 0, 999, frozenset(), 4, True),  # the owner's bits
        (0o600, 0, 0, 999, frozenset({0}), 4, False),  # root's file, the account in root's group: group bits 0
        (0o640, 0, 50, 999, frozenset({50}), 4, True),  # group bits
        (0o640, 0, 50, 999, frozenset({51}), 4, False),  # not that group: other bits
        (0o604, 999, 0, 999, frozenset(), 4, True),  # the owner's bits win (rw-), so read is fine
        (0o044, 999, 0, 999, frozenset(), 4, False),  # the owner's bits win even when "other" may read
        (0o644, 0, 0, None, frozenset(), 4, True),  # an account not created yet: other bits
        (0o640, 0, 0, None, frozenset(), 4, False),
        (0o750, 0, 0, None, frozenset(), 1, False),  # a directory it cannot search
        (0o751, 0, 0, None, frozenset(), 1, True),  # search without read
        (0o751, 0, 0, None, frozenset(), 5, False),  # the model directory: read and search
        (0o000, 5, 5, 0, frozenset(), 4, True),  # root
    ],
)
def test_permission_bit_math(
    mode: int, owner: int, group: int, uid: int | None, gids: frozenset[int], want: int, allowed: bool
) -> None:
    assert module.may_access(stat_of(mode, owner, group), uid, gids, want) is allowed


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every account can reach (pytest's own tmp_path is under a 0700 directory)."""
    root = Path(tempfile.mkdtemp(prefix="sglang-model-access-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root)


def model_dir(root: Path) -> Path:
    """A small model: config, index, two shards, a tokenizer; every directory on the way searchable by anyone."""
    root.chmod(0o755)
    directory = root / "srv" / "m"
    directory.mkdir(parents=True)
    (root / "srv").chmod(0o755)
    directory.chmod(0o755)
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}'
    )
    for name in ("model-1.safetensors", "model-2.safetensors", "tokenizer.json", "README.md"):
        (directory / name).write_text("x")
    for path in directory.iterdir():
        path.chmod(0o644)
    return directory


def inside(lines: list[str], directory: Path) -> list[str]:
    return [line for line in lines if line.startswith(str(directory.parent))]


def plan_with_model(host: str, tables: list[dict[str, Any]], model: dict[str, Any], **variables: Any) -> list[str]:
    from ansible_collections.sglang.fleet.plugins.filter.sglang_plan import sglang_plan
    from conftest import host_facts, plan_settings

    problems: list[str] = sglang_plan(plan_settings(host, **variables), host_facts(host, model), tables)["problems"]
    return problems


def test_files_the_server_reads(open_root: Path) -> None:
    directory = model_dir(open_root)
    assert module.files_to_read(str(directory)) == [
        "config.json", "model-1.safetensors", "model-2.safetensors", "model.safetensors.index.json", "tokenizer.json",
    ]  # fmt: skip


def test_unreadable_files_and_directories_by_the_other_bits(open_root: Path) -> None:
    directory = model_dir(open_root)
    names = module.files_to_read(str(directory))
    assert inside(module.unreadable_by_bits(str(directory), names, None, frozenset()), directory) == []
    (directory / "model-2.safetensors").chmod(0o600)
    (directory / "README.md").chmod(0o600)  # not read by the server
    lines = module.unreadable_by_bits(str(directory), names, None, frozenset())
    assert inside(lines, directory) == [f"{directory}/model-2.safetensors: not readable (-rw------- 0:0)"]
    directory.chmod(0o750)
    assert inside(module.unreadable_by_bits(str(directory), names, None, frozenset()), directory)[0] == (
        f"{directory}: directory not readable and searchable (drwxr-x--- 0:0)"
    )
    (open_root / "srv").chmod(0o700)
    assert inside(module.unreadable_by_bits(str(directory), names, None, frozenset()), directory) == [
        f"{open_root}/srv: directory not searchable (drwx------ 0:0)"
    ], "one line for a directory it cannot search, none for what is below"


def test_the_group_of_the_account_counts(open_root: Path) -> None:
    directory = model_dir(open_root)
    names = module.files_to_read(str(directory))
    os.chown(directory / "config.json", 0, 4242)
    (directory / "config.json").chmod(0o640)
    assert inside(module.unreadable_by_bits(str(directory), names, 4343, frozenset({4242})), directory) == []
    assert inside(module.unreadable_by_bits(str(directory), names, 4343, frozenset()), directory) == [
        f"{directory}/config.json: not readable (-rw-r----- 0:4242)"
    ]


def test_an_account_that_does_not_exist_yet_is_checked_by_the_other_bits(open_root: Path) -> None:
    directory = model_dir(open_root)
    (directory / "config.json").chmod(0o640)
    facts = module.service_access(str(directory), "sglang-fleet-no-such-user")
    assert facts["read_as"] == "sglang-fleet-no-such-user (not created yet: other bits)"
    assert f"{directory}/config.json: not readable (-rw-r----- 0:0)" in facts["unreadable"]


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another account needs root")
def test_an_existing_account_is_asked_of_the_kernel(open_root: Path) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no account nobody")
    directory = model_dir(open_root)
    (directory / "model-1.safetensors").chmod(0o600)
    facts = module.service_access(str(directory), "nobody")
    assert facts["read_as"] == f"nobody (uid {nobody.pw_uid})"
    assert inside(facts["unreadable"], directory) == [f"{directory}/model-1.safetensors: not readable (-rw------- 0:0)"]
    os.chown(directory / "model-1.safetensors", nobody.pw_uid, -1)
    assert inside(module.service_access(str(directory), "nobody")["unreadable"], directory) == []


def test_no_user_checks_only_the_hidden_paths(tmp_path: Path) -> None:
    assert module.service_access(str(tmp_path), "") == {"hidden_by": "PrivateTmp=yes hides /tmp", "unreadable": []}


def test_a_model_under_home_is_a_problem_with_a_fix(support_tables: list[dict[str, Any]], model_facts: dict[str, Any]) -> None:
    model = {**model_facts, "hidden_by": "ProtectHome=yes hides /home", "unreadable": []}
    problems = plan_with_model("b200", support_tables, model, sglang_model_path="/home/models/Qwen3.6-27B")
    assert problems == [
        'b200 host: sglang_model_path="/home/models/Qwen3.6-27B": the servers cannot see it: their unit\'s '
        "ProtectHome=yes hides /home (root can read it, the service cannot); fix: move the model out of /home, "
        "/root, /run/user and /tmp, e.g. to /srv/models, and set sglang_model_path"
    ]


def test_unreadable_files_are_one_line_each_up_to_five(support_tables: list[dict[str, Any]], model_facts: dict[str, Any]) -> None:
    lines = [f"/srv/models/Qwen3.6-27B/model-0000{i}-of-00011.safetensors: not readable (-rw------- 0:0)" for i in range(1, 8)]
    model = {**model_facts, "hidden_by": None, "unreadable": lines, "read_as": "sglang (uid 999)"}
    problems = plan_with_model("b200", support_tables, model)
    assert len(problems) == 6
    assert problems[0] == (
        'b200 host: sglang_model_path="/srv/models/Qwen3.6-27B": /srv/models/Qwen3.6-27B/model-00001-of-00011.safetensors: '
        "not readable (-rw------- 0:0): the servers' account sglang (uid 999) cannot read it; fix: make it readable, e.g. "
        "chmod -R o+rX (or chgrp -R the servers' group and chmod -R g+rX) the model directory"
    )
    assert "2 more files or directories the servers' account sglang (uid 999) cannot read" in problems[5]


def test_a_readable_model_is_no_problem(support_tables: list[dict[str, Any]], model_facts: dict[str, Any]) -> None:
    model = {**model_facts, "hidden_by": None, "unreadable": [], "read_as": "sglang (uid 999)"}
    assert plan_with_model("ct129", support_tables, model) == []


def test_the_accounts_groups_are_those_systemd_gives_the_unit() -> None:
    assert module.account("sglang-fleet-no-such-user") == (None, frozenset())
    assert module.account("sglang-fleet-no-such-user", "root") == (None, frozenset({0})), "Group= exists already"
    root = module.account("root")
    assert root[0] == 0 and 0 in root[1]
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no account nobody")
    uid, gids = module.account("nobody", "root")
    assert uid == nobody.pw_uid and 0 in gids, "Group= replaces the primary group"
