"""Root never writes through a path another account controls (issue 38, finding 1).

"Another account" is simulated by planting the link before the code runs: in a directory that account may write
(the service home), it can make any name the writer uses a link to a file root owns (/etc/ld.so.preload). Each
writer of the collection that runs as root is tried against such a link; the victim file must stay as it was.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import safe_write
from ansible_collections.sglang.fleet.plugins.modules import sglang_instance_files, sglang_model_revision, sglang_rollout
from ansible_collections.sglang.fleet.plugins.modules import sglang_router_members as members

OWNER, GROUP = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
VICTIM = "# root's own file\n"
WORKERS = [{"url": "http://127.0.0.1:30000", "model_id": "/tmp/evil.so"}]


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the account's directory that root must never overwrite (stands for /etc/ld.so.preload)."""
    path = tmp_path / "etc" / "ld.so.preload"
    path.parent.mkdir()
    path.write_text(VICTIM)
    path.chmod(0o600)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The service account's home (/var/lib/sglang): a directory that account writes."""
    path = tmp_path / "var-lib-sglang"
    path.mkdir()
    return path


def untouched(victim: Path) -> bool:
    return victim.read_text() == VICTIM and stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_write_file_writes_atomically_with_mode(home: Path) -> None:
    target = home / "file.json"
    safe_write.write_file(str(target), b"{}\n", 0o640)
    assert target.read_bytes() == b"{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in home.iterdir()) == ["file.json"]


def test_write_file_refuses_a_link_at_the_target(home: Path, victim: Path) -> None:
    target = home / "file.json"
    target.symlink_to(victim)
    with pytest.raises(safe_write.LinkRefused, match="symbolic link"):
        safe_write.write_file(str(target), b"evil\n", 0o644)
    assert untouched(victim)
    assert target.is_symlink()
    assert sorted(p.name for p in home.iterdir()) == ["file.json"]  # no temporary left behind


def test_keep_workers_does_not_follow_a_link_planted_at_its_temporary_name(home: Path, victim: Path) -> None:
    """The reproduction of the review: router-workers.json.tmp -> /etc/ld.so.preload."""
    workers_file = home / "router-workers.json"
    (home / "router-workers.json.tmp").symlink_to(victim)
    assert members.keep_workers(str(workers_file), WORKERS) is True
    assert untouched(victim)
    assert '"model_id": "/tmp/evil.so"' in workers_file.read_text()
    assert not workers_file.is_symlink()


def test_keep_workers_refuses_a_link_planted_at_the_workers_file(home: Path, victim: Path) -> None:
    workers_file = home / "router-workers.json"
    workers_file.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        members.keep_workers(str(workers_file), WORKERS)
    assert untouched(victim)


def test_instance_files_refuse_a_link_at_a_managed_file(home: Path, victim: Path) -> None:
    target = home / "sglang-30000.env"
    target.symlink_to(victim)
    spec = {"path": str(target), "content": "A=1\n", "owner": OWNER, "group": GROUP, "mode": "0644"}
    with pytest.raises(OSError, match="symbolic link"):
        sglang_instance_files.apply(spec, check_mode=False)
    assert untouched(victim)


def test_attributes_are_never_changed_through_a_link(home: Path, victim: Path) -> None:
    """Same content, another mode: the mode is set on the file itself, never on a link's target."""
    link = home / "sglang-30000.env"
    link.symlink_to(victim)
    with pytest.raises(safe_write.LinkRefused):
        safe_write.set_attributes(str(link), 0o644)
    assert untouched(victim)


def test_rollout_last_good_copies_never_follow_links(tmp_path: Path, victim: Path) -> None:
    config = tmp_path / "config"
    (config / "last-good").mkdir(parents=True)
    current = config / "sglang-30000.env"
    current.write_text("A=1\n")
    last_good = config / "last-good" / "sglang-30000.env"
    last_good.symlink_to(victim)
    instance = {"files": {"last_good": [[str(current), str(last_good)]]}}
    with pytest.raises(OSError, match="symbolic link"):
        sglang_rollout.save_last_good(instance)
    assert untouched(victim)
    # Restoring: a link planted at the current file is refused as well.
    last_good.unlink()
    last_good.write_text("A=0\n")
    current.unlink()
    current.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        sglang_rollout.restore(instance)
    assert untouched(victim)


def test_rollout_last_good_copy_keeps_content_and_mode(tmp_path: Path) -> None:
    (tmp_path / "last-good").mkdir()
    current, last_good = tmp_path / "sglang-30000.yaml", tmp_path / "last-good" / "sglang-30000.yaml"
    current.write_text("api-key: k\n")
    current.chmod(0o640)
    sglang_rollout.save_last_good({"files": {"last_good": [[str(current), str(last_good)]]}})
    assert last_good.read_text() == "api-key: k\n"
    assert stat.S_IMODE(last_good.stat().st_mode) == 0o640


def test_model_revision_record_does_not_follow_a_link_at_its_old_partial_name(tmp_path: Path, victim: Path) -> None:
    verified = tmp_path / "sglang-fleet" / "model-sha256.json"
    verified.parent.mkdir()
    (verified.parent / f"model-sha256.json.{os.getpid()}").symlink_to(victim)
    sglang_model_revision.write_record(str(verified), {"/m/a": {"sha256": "0" * 64}})
    assert untouched(victim)
    assert '"sha256"' in verified.read_text()
