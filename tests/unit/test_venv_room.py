"""Preflight's room check for an SGLang install (roles/sglang_venv): the venv and the wheelhouse the install will write,
summed per filesystem, against the host's free bytes, before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_venv import GIB, sglang_venv_room_problems
from ansible_collections.sglang.fleet.plugins.module_utils.installed import free_space

ROOT = Path(__file__).resolve().parents[2]
FOOTPRINT = {"wheels_bytes": 4 * GIB, "venv_bytes": 11 * GIB}
PLACES = {
    "venv_root": "/opt/sglang",
    "host_wheelhouse": "/var/cache/sglang-fleet/wheelhouse",
    "archive": "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23.tar",
    "unpacked": "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23/.unpacked-*",
}


def space(root_free: float, cache_free: float | None = None) -> dict[str, dict[str, Any]]:
    """Free bytes of the venv root's and the wheelhouse's filesystems: one filesystem unless `cache_free` is given."""
    cache = {"disk_path": "/var/cache", "disk_free_bytes": int(cache_free * GIB), "disk_device": 2} if cache_free else None
    root = {"disk_path": "/", "disk_free_bytes": int(root_free * GIB), "disk_device": 1}
    return {"/opt/sglang": root, "/var/cache/sglang-fleet/wheelhouse": cache or root}


def problems(free: dict[str, dict[str, Any]], installs: bool = True, found: dict[str, list[str]] | None = None) -> list[str]:
    return sglang_venv_room_problems("b200", FOOTPRINT, installs, found or {}, free, PLACES, "0.5.23")


def test_one_filesystem_needs_the_venv_the_archive_and_the_unpacked_wheels_together() -> None:
    assert problems(space(19.5)) == []
    (line,) = problems(space(18.5))
    assert line.startswith('b200 host: sglang_venv_root="/opt/sglang": installing SGLang 0.5.23 writes 11.0 GiB under')
    assert "8.0 GiB under /var/cache/sglang-fleet/wheelhouse, 19.0 GiB on the filesystem of /, which has 18.5 GiB free" in line
    assert "set sglang_venv_root / sglang_venv_host_wheelhouse to a filesystem with room" in line


def test_each_filesystem_is_judged_by_what_goes_there() -> None:
    assert problems(space(11.5, 8.5)) == []
    (line,) = problems(space(11.5, 7.5))
    assert 'sglang_venv_host_wheelhouse="/var/cache/sglang-fleet/wheelhouse"' in line and "7.5 GiB free" in line
    assert "sglang_venv_root" not in line.split("fix:")[1]


def test_what_an_earlier_run_left_is_not_counted_again() -> None:
    archive_only = {PLACES["archive"]: [PLACES["archive"]]}
    assert problems(space(15.5), found=archive_only) == []  # 11 + 4: the wheels are still to be unpacked
    unpacked = {**archive_only, PLACES["unpacked"]: ["/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23/.unpacked-ab"]}
    assert problems(space(11.5), found=unpacked) == []
    assert problems(space(10.5), found=unpacked) != []


def test_no_install_no_footprint_no_check() -> None:
    assert problems(space(0.1), installs=False) == []
    assert sglang_venv_room_problems("b200", {}, True, {}, space(0.1), PLACES, "0.5.23") == []


def test_free_space_names_the_nearest_existing_directory_and_its_filesystem(tmp_path: Path) -> None:
    found = free_space([str(tmp_path / "not" / "yet"), str(tmp_path)])
    assert found[str(tmp_path / "not" / "yet")]["disk_path"] == str(tmp_path)
    assert found[str(tmp_path)]["disk_device"] == os.stat(tmp_path).st_dev
    assert found[str(tmp_path)]["disk_free_bytes"] > 0


def test_every_supported_release_has_a_measured_footprint() -> None:
    footprints = yaml.safe_load((ROOT / "roles/sglang_venv/vars/main.yml").read_text())["_sglang_venv_footprints"]
    releases = sorted(p.stem.removeprefix("constraints-") for p in (ROOT / "roles/sglang_venv/files").glob("constraints-*.txt"))
    assert sorted(footprints["sglang"]) == releases
    for entry in footprints["sglang"].values():
        assert isinstance(entry["wheels_bytes"], int) and isinstance(entry["venv_bytes"], int)
        assert entry["venv_bytes"] > entry["wheels_bytes"] > GIB
