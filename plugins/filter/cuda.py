"""Ansible filter: is the CUDA setting valid and the NVIDIA driver new enough? One problem line per reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line


def cuda_problems(host: str, method: str, methods: list[str], driver: str | None, min_major: int, cuda_version: str) -> list[str]:
    problems = []
    if method not in methods:
        problems.append(
            problem_line(host, "host", "cuda_install_method", method, "unknown method", f"use one of {', '.join(methods)}")
        )
    major = str(driver or "").split(".", maxsplit=1)[0]
    if driver and (not major.isdigit() or int(major) < min_major):
        problems.append(
            problem_line(
                host,
                "host",
                "NVIDIA driver",
                driver,
                f"CUDA {cuda_version} needs driver {min_major} or newer",
                f"install driver R{min_major}+ and hold it (an unattended upgrade can break the driver/library match)",
            )
        )
    return problems


def cuda_request(method: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What deploy's probe compares and reads for CUDA installed by `method` (the role's request, cuda_probe): the apt
    method's repository and pin files (`apt_files`, rendered on the control node), the host's CUDA as pinned (apt: the
    toolkit package at its version, the repository key and `home` linked to /usr/local/cuda-<version>; wheels: the OS
    packages on Debian, the venv at `wheels_prefix` with its pins and `home` linked to `wheels_home`) and, for every
    method ('none' too: the services need it), a working nvcc under `home`. One filter call: the settings are templated
    once, not each string of the structures it replaced."""
    home = settings["home"]
    packages = {
        "apt": {settings["apt_package"]: settings["apt_version"]},
        "wheels": dict.fromkeys(settings["wheels_os_packages"], "") if settings["debian"] else {},
    }
    venvs = {"wheels": [{"path": settings["wheels_prefix"], "pins": settings["wheels"]}]}
    paths = {
        "apt": [
            {"path": settings["apt_keyring"], "state": "file"},
            {"path": home, "state": "link", "src": f"/usr/local/cuda-{settings['version']}"},
        ],
        "wheels": [{"path": home, "state": "link", "src": settings["wheels_home"]}],
    }
    return {
        "name": "cuda",
        "role_path": settings["role_path"],
        "files": settings["apt_files"] if method == "apt" else [],
        "read": {
            "packages": packages.get(method, {}),
            "venvs": venvs.get(method, []),
            "paths": paths.get(method, []),
            "commands": [{"argv": [f"{home}/bin/nvcc", "--version"]}],
        },
        # Its decision (module_utils/role_decisions.py: cuda) needs nothing but the answer.
        "decide": {},
    }


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"cuda_problems": cuda_problems, "cuda_request": cuda_request}
