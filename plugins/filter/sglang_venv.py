"""Ansible filter: can this host build the venv the pinned SGLang needs? One problem line per reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

# SGLang 0.5.23 publishes wheels for CPython 3.11-3.13, built for manylinux_2_34 (glibc 2.34+).
SUPPORTED_PYTHON = ((3, 11), (3, 13))
MIN_GLIBC = (2, 34)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def sglang_venv_problems(
    host: str,
    runtime: str,
    runtimes: list[str],
    python: str,
    python_result: Mapping[str, Any],
    installs_python: bool,
    glibc: str,
    version: str,
) -> list[str]:
    """Problems with the runtime choice, the Python that builds the venv, and glibc."""
    problems = []
    if runtime not in runtimes:
        problems.append(
            problem_line(host, "host", "sglang_venv_runtime", runtime, "unknown runtime", f"use one of {', '.join(runtimes)}")
        )
    if python_result.get("rc") != 0:
        why = (str(python_result.get("stderr") or python_result.get("msg") or "")).strip().splitlines()[-1:] or ["not found"]
        problems.append(
            problem_line(
                host,
                "host",
                "sglang_venv_python",
                python,
                f"does not run ({why[0]})",
                "install Python 3.11-3.13 and point sglang_venv_python at it",
            )
        )
    else:
        found = _version(str(python_result.get("stdout", "")).strip())
        if not installs_python and not SUPPORTED_PYTHON[0] <= found[:2] <= SUPPORTED_PYTHON[1]:
            shown = ".".join(map(str, found))
            problems.append(
                problem_line(
                    host,
                    "host",
                    "sglang_venv_python",
                    python,
                    f"Python {shown} has no SGLang {version} wheels (3.11-3.13 only)",
                    "install python3.11, 3.12 or 3.13 (e.g. from deadsnakes on Ubuntu 22.04) and set sglang_venv_python",
                )
            )
    if glibc and _version(glibc) < MIN_GLIBC:
        problems.append(
            problem_line(
                host,
                "host",
                "glibc",
                glibc,
                f"SGLang {version} wheels need glibc 2.34 or newer",
                "upgrade the distribution (Debian 12+, Ubuntu 22.04+)",
            )
        )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_venv_problems": sglang_venv_problems}
