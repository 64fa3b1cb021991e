"""sglang_installed: the read-only probe that lets an install role skip its tasks when the host is as pinned."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils import installed as module


def venv(root: Path, *dists: str) -> Path:
    """A venv as pip leaves it: bin/python and one .dist-info folder per installed distribution."""
    (root / "bin").mkdir(parents=True)
    (root / "bin/python").write_text("")
    site = root / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    for dist in dists:
        (site / f"{dist}.dist-info").mkdir()
    return root


def test_a_venv_with_every_pin_at_its_version_has_no_difference(tmp_path: Path) -> None:
    path = venv(tmp_path / "v", "sglang_router-0.3.2", "nvidia_cuda_nvcc-13.0.88", "requests-2.32.3")
    pins = ["sglang-router==0.3.2", "nvidia-cuda-nvcc==13.0.88"]
    assert module.differences({"venvs": [{"path": str(path), "pins": pins}]}) == []


@pytest.mark.parametrize(
    ("dists", "expected"),
    [
        (["sglang_router-0.3.1"], "sglang-router 0.3.2 is not installed (0.3.1 is)"),
        ([], "sglang-router 0.3.2 is not installed"),
    ],
)
def test_a_pin_at_another_version_or_missing_is_a_difference(tmp_path: Path, dists: list[str], expected: str) -> None:
    path = venv(tmp_path / "v", *dists)
    [difference] = module.differences({"venvs": [{"path": str(path), "pins": ["sglang-router==0.3.2"]}]})
    assert difference == f"{path}: {expected}"


def test_no_venv_is_one_difference(tmp_path: Path) -> None:
    assert module.differences({"venvs": [{"path": str(tmp_path / "none"), "pins": ["a==1"]}]}) == [f"{tmp_path}/none: no venv"]


def test_files_links_and_folders_are_compared_by_content_target_and_mode(tmp_path: Path) -> None:
    (tmp_path / "checker.py").write_text("print('v2')\n")
    (tmp_path / "checker.py").chmod(0o644)
    (tmp_path / "cuda").symlink_to("/opt/cuda-13.0/old")
    (tmp_path / "root").mkdir(mode=0o700)
    me = pwd.getpwuid(os.getuid()).pw_name
    found = module.differences(
        {
            "paths": [
                {"path": str(tmp_path / "checker.py"), "state": "file", "mode": "0644", "content": "print('v3')\n"},
                {"path": str(tmp_path / "cuda"), "state": "link", "src": "/opt/cuda-13.0/new"},
                {"path": str(tmp_path / "root"), "state": "directory", "mode": "0755", "owner": me},
                {"path": str(tmp_path / "gone"), "state": "file"},
                {"path": str(tmp_path / "checker.py"), "state": "directory"},
            ]
        }
    )
    assert found == [
        f"{tmp_path}/checker.py: content differs",
        f"{tmp_path}/cuda: points to /opt/cuda-13.0/old, not /opt/cuda-13.0/new",
        f"{tmp_path}/root: mode 0700, not 0755",
        f"{tmp_path}/gone: missing",
        f"{tmp_path}/checker.py: not a directory",
    ]
    same = {"path": str(tmp_path / "checker.py"), "content": "print('v2')\n", "mode": "0644"}
    assert module.differences({"paths": [same]}) == []


def dpkg(stdout: str) -> Any:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert argv[:2] == ["dpkg-query", "--show"]
        return subprocess.CompletedProcess(argv, 1, stdout, "dpkg-query: no packages found matching python3.11\n")

    return run


def test_packages_must_be_installed_and_at_the_pinned_version_where_one_is_given() -> None:
    run = dpkg(
        "cuda-toolkit-13-0\tinstall ok installed\t13.0.1-1\n"
        "python3-venv\tinstall ok installed\t3.11.2-1+b1\n"
        "python3-packaging\tdeinstall ok config-files\t23.0-1\n"
    )
    packages = {"cuda-toolkit-13-0": "13.0.2-1", "python3-venv": "", "python3-packaging": "", "python3.11": ""}
    assert module.package_differences(packages, run) == [
        "package cuda-toolkit-13-0=13.0.2-1 is not installed (13.0.1-1 is)",
        "package python3-packaging is not installed",
        "package python3.11 is not installed",
    ]


def test_commands_run_only_on_an_otherwise_complete_install_and_must_print_what_is_pinned(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "0.5.22\n", "")

    command = {"argv": ["python", "-c", "print(version)"], "stdout": "0.5.23"}
    missing = {"paths": [{"path": str(tmp_path / "gone")}], "commands": [command]}
    assert module.differences(missing, run) == [f"{tmp_path}/gone: missing"]
    assert calls == []
    assert module.differences({"commands": [command]}, run) == ["python -c print(version): printed '0.5.22', not '0.5.23'"]
    assert module.differences({"commands": [{"argv": ["/nonexistent/nvcc", "--version"]}]}) == [
        "/nonexistent/nvcc --version: No such file or directory"
    ]


def test_an_account_is_compared_by_primary_group_memberships_home_and_shell() -> None:
    me = pwd.getpwuid(os.getuid())
    primary = grp.getgrgid(me.pw_gid).gr_name
    exact = {"name": me.pw_name, "group": primary, "groups": [], "home": me.pw_dir, "shell": me.pw_shell}
    assert module.account_differences(exact) == []
    assert module.account_differences({**exact, "home": "/elsewhere", "groups": ["no-such-group"]}) == [
        f"user {me.pw_name}: not in group no-such-group",
        f"user {me.pw_name}: home is {me.pw_dir}, not /elsewhere",
    ]
    assert module.account_differences({"name": "no-such-user-here"}) == ["user no-such-user-here: missing"]


def test_unit_states_come_from_one_systemctl_show_and_an_unknown_unit_has_empty_values() -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils import systemd

    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = (
            "Id=sglang-router.service\nActiveState=active\nUnitFileState=enabled\n\n"
            "Id=gone.service\nActiveState=inactive\nUnitFileState=\n"
        )
        return subprocess.CompletedProcess(argv, 0, out, "")

    states = systemd.show(["sglang-router.service", "gone.service", "never.service"], ["ActiveState", "UnitFileState"], run=run)
    assert states == {
        "sglang-router.service": {"ActiveState": "active", "UnitFileState": "enabled"},
        "gone.service": {"ActiveState": "inactive", "UnitFileState": ""},
        "never.service": {"ActiveState": "", "UnitFileState": ""},
    }
    assert len(calls) == 1 and calls[0][:2] == ["systemctl", "show"]
    assert systemd.show([], ["ActiveState"], run=run) == {} and len(calls) == 1


def test_the_probe_reads_unit_properties_file_times_accounts_and_which_paths_differ(tmp_path: Path) -> None:
    (tmp_path / "unit.service").write_text("[Unit]\n")
    os.utime(tmp_path / "unit.service", (1000.5, 1000.5))
    (tmp_path / "same").write_text("x")
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "Id=a.service\nActiveState=active\nExecMainStartTimestamp=n/a\n", "")

    me = pwd.getpwuid(os.getuid()).pw_name
    result = module.probe(
        {
            "units": ["a.service"],
            "unit_properties": ["ActiveState", "ExecMainStartTimestamp"],
            "mtimes": [str(tmp_path / "unit.service"), str(tmp_path / "gone")],
            "accounts": [{"name": me}, {"name": "no-such-user-here"}],
            "paths": [{"path": str(tmp_path / "same"), "content": "x"}, {"path": str(tmp_path / "gone")}],
            "globs": [str(tmp_path / "*.service")],
        },
        run,
    )
    assert result["units"] == {"a.service": {"ActiveState": "active", "ExecMainStartTimestamp": "n/a"}}
    assert "--timestamp=us+utc" in calls[0] and "--property=ExecMainStartTimestamp" in calls[0]
    assert result["mtimes"] == {str(tmp_path / "unit.service"): 1000.5}, "a missing file is left out"
    assert result["accounts"] == {me: True, "no-such-user-here": False}
    assert result["differing_paths"] == [str(tmp_path / "gone")]
    assert result["found"] == {str(tmp_path / "*.service"): [str(tmp_path / "unit.service")]}
