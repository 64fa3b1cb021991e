"""Ansible filter: is the CUDA setting valid and the NVIDIA driver new enough? One problem line per reason."""

from __future__ import annotations

from collections.abc import Callable
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


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"cuda_problems": cuda_problems}
