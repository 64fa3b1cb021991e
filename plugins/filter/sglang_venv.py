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


GIB = 1 << 30


def sglang_venv_room_problems(
    host: str,
    footprint: Mapping[str, int],
    installs: bool,
    found: Mapping[str, list[str]],
    free_space: Mapping[str, Mapping[str, Any]],
    places: Mapping[str, str],
    version: str,
) -> list[str]:
    """Whether the host has room for what an install will write, before it writes anything: the venv
    (`footprint.venv_bytes`) under `places.venv_root`, and the wheelhouse archive and its unpacked wheels
    (`footprint.wheels_bytes` each, less what `found` shows is there already: `places.archive`, `places.unpacked`)
    under `places.host_wheelhouse`; summed where both are one filesystem (`free_space`'s `disk_device`)."""
    if not installs or not footprint:
        return []
    wheels = int(footprint["wheels_bytes"])
    needs = {
        ("sglang_venv_root", places["venv_root"]): int(footprint["venv_bytes"]),
        ("sglang_venv_host_wheelhouse", places["host_wheelhouse"]): (0 if found.get(places["archive"]) else wheels)
        + (0 if found.get(places["unpacked"]) else wheels),
    }
    by_device: dict[Any, list[tuple[str, str, int]]] = {}
    for (variable, path), need in needs.items():
        by_device.setdefault(free_space[path]["disk_device"], []).append((variable, path, need))
    problems = []
    for entries in by_device.values():
        total = sum(need for _, _, need in entries)
        room = free_space[entries[0][1]]
        if total <= int(room["disk_free_bytes"]):
            continue
        parts = " and ".join(f"{need / GIB:.1f} GiB under {path}" for _, path, need in entries if need)
        problems.append(
            problem_line(
                host,
                "host",
                entries[0][0],
                entries[0][1],
                f"installing SGLang {version} writes {parts}, {total / GIB:.1f} GiB on the filesystem of "
                f"{room['disk_path']}, which has {int(room['disk_free_bytes']) / GIB:.1f} GiB free",
                "free space there, or set " + " / ".join(variable for variable, _, _ in entries)
                + " to a filesystem with room (sglang_venv_keep_previous: fewer old venvs kept)",
            )
        )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_venv_problems": sglang_venv_problems, "sglang_venv_room_problems": sglang_venv_room_problems}
