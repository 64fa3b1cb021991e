"""Preflight's room check for an SGLang install (roles/sglang_venv): the venv and the wheelhouse the install will write,
summed per filesystem, against the host's free bytes, before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.fleet.plugins.filter.sglang_venv import (
    GIB,
    sglang_venv_cache_room_problems,
    sglang_venv_room_problems,
)
from ansible_collections.sglang.fleet.plugins.lookup.sglang_free_space import LookupModule
from ansible_collections.sglang.fleet.plugins.module_utils.installed import free_space

ROOT = Path(__file__).resolve().parents[2]
FOOTPRINT = {"wheels_bytes": 4 * GIB, "venv_bytes": 11 * GIB}
PLACES = {
    "venv_root": "/opt/sglang",
    "venv": "/opt/sglang/sglang-0.5.23",
    "venvs": "/opt/sglang/sglang-*",
    "host_wheelhouse": "/var/cache/sglang-fleet/wheelhouse",
    "archive": "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23.tar",
    "unpacked": "/var/cache/sglang-fleet/wheelhouse/sglang-0.5.23/.unpacked-*",
}


def space(root_free: float, cache_free: float | None = None) -> dict[str, dict[str, Any]]:
    """Free bytes of the venv root's and the wheelhouse's filesystems: one filesystem unless `cache_free` is given."""
    cache = {"disk_path": "/var/cache", "disk_free_bytes": int(cache_free * GIB), "disk_device": 2} if cache_free else None
    root = {"disk_path": "/", "disk_free_bytes": int(root_free * GIB), "disk_device": 1}
    return {"/opt/sglang": root, "/var/cache/sglang-fleet/wheelhouse": cache or root}


def problems(
    free: dict[str, dict[str, Any]],
    installs: bool = True,
    found: dict[str, list[str]] | None = None,
    model: list[dict[str, Any]] | None = None,
) -> list[str]:
    return sglang_venv_room_problems("b200", FOOTPRINT, installs, found or {}, free, PLACES, "0.5.23", model or [])


def model_need(gib: float, device: int, free: float) -> dict[str, Any]:
    """The plan's disk need of a model revision (plan_host's disk_needs)."""
    return {
        "variable": "sglang_model_root",
        "what": "the model's revision (11 file(s) to send)",
        "path": "/srv/models/Qwen--Qwen3.6-27B/6a9e13b",
        "bytes": int(gib * GIB),
        "disk_path": "/srv" if device == 2 else "/",
        "disk_free_bytes": int(free * GIB),
        "disk_device": device,
    }


def test_one_filesystem_needs_the_venv_the_archive_and_the_unpacked_wheels_together() -> None:
    assert problems(space(19.5)) == []
    (line,) = problems(space(18.5))
    assert line.startswith('b200 host: sglang_venv_root="/opt/sglang": the deploy writes the SGLang 0.5.23 venv 11.0 GiB')
    assert "its wheelhouse 8.0 GiB under /var/cache/sglang-fleet/wheelhouse = 19.0 GiB on the filesystem of /" in line
    assert "which has 18.5 GiB free" in line
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


def test_the_model_revision_on_the_same_filesystem_counts_with_the_install() -> None:
    # 19 GiB of install and 51 GiB of model: each fits the 60 GiB alone, not together.
    (line,) = problems(space(60), model=[model_need(51, 1, 60)])
    assert "+ the model's revision (11 file(s) to send) 51.0 GiB under /srv/models/Qwen--Qwen3.6-27B/6a9e13b" in line
    assert "= 70.0 GiB on the filesystem of /, which has 60.0 GiB free" in line
    assert "set sglang_venv_root / sglang_venv_host_wheelhouse / sglang_model_root to a filesystem" in line
    assert problems(space(70.5), model=[model_need(51, 1, 70.5)]) == []


def test_a_model_on_another_filesystem_or_one_that_does_not_fit_alone_is_not_summed() -> None:
    assert problems(space(20), model=[model_need(51, 2, 60)]) == []
    # The plan reports a model that does not fit on its own; the install's line would say it again.
    assert problems(space(20), model=[model_need(51, 1, 20)]) == []


def test_the_control_node_needs_room_for_the_wheels_and_their_archive_once() -> None:
    cache = {"path": "/root/.cache/sglang-fleet/wheelhouse", "disk_path": "/root", "disk_free_bytes": int(7.5 * GIB)}
    (line,) = sglang_venv_cache_room_problems("b200", FOOTPRINT, True, False, cache, "0.5.23")
    assert line.startswith('b200 host: sglang_venv_wheelhouse_cache="/root/.cache/sglang-fleet/wheelhouse": the control')
    assert "8.0 GiB (the wheels and their archive) on the filesystem of /root, which has 7.5 GiB free" in line
    assert sglang_venv_cache_room_problems("b200", FOOTPRINT, True, True, cache, "0.5.23") == []  # built already
    assert sglang_venv_cache_room_problems("b200", FOOTPRINT, False, False, cache, "0.5.23") == []
    assert sglang_venv_cache_room_problems("b200", FOOTPRINT, True, False, {**cache, "disk_free_bytes": 8 * GIB}, "0.5.23") == []


def test_the_lookup_reads_the_control_nodes_filesystem(tmp_path: Path) -> None:
    (found,) = LookupModule().run([str(tmp_path / "wheelhouse" / "not-yet")])
    assert found["disk_path"] == str(tmp_path) and found["disk_device"] == os.stat(tmp_path).st_dev
    assert found["path"] == str(tmp_path / "wheelhouse" / "not-yet") and found["disk_free_bytes"] > 0


def test_a_small_part_reads_in_mib_not_as_nothing() -> None:
    (line,) = problems(space(19), model=[{**model_need(0, 1, 19), "bytes": 578868}])
    assert "the model's revision (11 file(s) to send) 0.6 MiB under" in line


def test_a_venv_already_there_is_not_counted_again() -> None:
    """An install that only updates the venv (its checker, one package) writes the wheelhouse, not a new venv."""
    there = {PLACES["venvs"]: ["/opt/sglang/sglang-0.5.17", PLACES["venv"]]}
    assert problems(space(8.5), found=there) == []
    assert problems(space(8.5), found={PLACES["venvs"]: ["/opt/sglang/sglang-0.5.17"]}) != []
