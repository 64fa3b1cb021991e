"""Ansible filter: can this host build the venv the pinned SGLang needs? One problem line per reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

# The CPython versions each supported SGLang release's pinned package set installs on, and the glibc its wheels need:
# the Pythons for which every line of roles/sglang_venv/files/constraints-<version>.txt resolves to a wheel, as the
# wheelhouse downloads it (pip install --dry-run --no-deps --only-binary=:all: --python-version X --platform
# manylinux_2_17..2_34_x86_64 -r <the constraints>, 2026-12-05). Narrower than SGLang's own wheels (cp310-cp313 for
# 0.5.17-0.5.21, cp311-cp313 for 0.5.22 and 0.5.23, all manylinux_2_34, nothing below glibc 2.34; an older glibc gets
# an old release's wheel when nothing pins the version): on 3.13 outlines-core==0.1.26 has no wheel, on 3.10 26 of
# 0.5.17's pinned packages (airportsdata, numpy 2.3.5, scipy 1.17.1, pandas 3.1.1, ...) and 24 of 0.5.23's have none.
# 0.5.18-0.5.22 (wheels cp310-cp313 up to 0.5.21, cp311-cp313 for 0.5.22 (Requires-Python >=3.11), all
# manylinux_2_34) pin the same outlines==0.1.11 (outlines-core 0.1.26: no cp313 wheel) and numpy/scipy lines as the
# two releases resolved by hand, so the same range holds.
WHEEL_TAGS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    version: ((3, 11), (3, 12), (2, 34)) for version in ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
}
NEWEST = max(WHEEL_TAGS, key=lambda release: tuple(int(part) for part in release.split(".")))
# The gateway package's first release under its own name: smg 1.x (sglang-router stopped at 0.3.2).
GATEWAY_FIRST = (1, 0)


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
    router_version: str = "",
) -> list[str]:
    """Problems with the runtime choice, the Python that builds the venv and glibc (against the wheel tags of SGLang
    `version`), and the pinned gateway (`router_version`)."""
    problems = []
    low, high, min_glibc = WHEEL_TAGS.get(version, WHEEL_TAGS[NEWEST])
    pythons = f"{low[0]}.{low[1]}-{high[0]}.{high[1]}"
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
                str(python_result.get("fix") or f"install Python {pythons} and point sglang_venv_python at it"),
            )
        )
    else:
        found = _version(str(python_result.get("stdout", "")).strip())
        if not installs_python and not low <= found[:2] <= high:
            shown = ".".join(map(str, found))
            problems.append(
                problem_line(
                    host,
                    "host",
                    "sglang_venv_python",
                    python,
                    f"Python {shown} cannot install SGLang {version}'s pinned packages (wheels for {pythons} only)",
                    f"install Python {pythons} (e.g. python3.11 from deadsnakes on Ubuntu 22.04) and set sglang_venv_python",
                )
            )
    if glibc and _version(glibc) < min_glibc:
        problems.append(
            problem_line(
                host,
                "host",
                "glibc",
                glibc,
                f"SGLang {version} wheels are manylinux_{min_glibc[0]}_{min_glibc[1]}: they need glibc "
                f"{min_glibc[0]}.{min_glibc[1]} or newer",
                "upgrade the distribution (Debian 12+, Ubuntu 22.04+)",
            )
        )
    if router_version and _version(router_version)[:2] < GATEWAY_FIRST:
        problems.append(
            problem_line(
                host,
                "host",
                "sglang_venv_router_version",
                router_version,
                "sglang-router is retired (0.3.2 was its last release; it polls /get_load, which SGLang 0.5.23 "
                "removed); the fleet runs its successor, the SGLang Model Gateway (smg)",
                "remove sglang_venv_router_version from the inventory (default: smg 1.13.0); a normal deploy moves "
                "the routers and gateways to smg",
            )
        )
    return problems


GIB = 1 << 30


def _size(count: int) -> str:
    """Bytes as GiB, or MiB below a tenth of a GiB (a small model's files would read 0.0 GiB)."""
    return f"{count / GIB:.1f} GiB" if count >= GIB // 10 else f"{count / (1 << 20):.1f} MiB"


def sglang_venv_room_problems(
    host: str,
    footprint: Mapping[str, int],
    installs: bool,
    found: Mapping[str, list[str]],
    free_space: Mapping[str, Mapping[str, Any]],
    places: Mapping[str, str],
    version: str,
    other_needs: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """Whether the host has room for what an install will write, before it writes anything: the venv
    (`footprint.venv_bytes`, unless `found` shows `places.venv` among `places.venvs`) under `places.venv_root`,
    and the wheelhouse archive and its unpacked wheels (`footprint.wheels_bytes` each, less what `found` shows is
    there already: `places.archive`, `places.unpacked`) under `places.host_wheelhouse`; summed per filesystem
    (`free_space`'s `disk_device`) with what the same deploy writes beside them (`other_needs`, the plan's
    `disk_needs`: the model's revision). A filesystem where those other needs alone do not fit is their own
    role's problem, not reported again."""
    if not installs or not footprint:
        return []
    wheels = int(footprint["wheels_bytes"])
    wheelhouse = (0 if found.get(places["archive"]) else wheels) + (0 if found.get(places["unpacked"]) else wheels)
    # An install that only brings the venv up to date (its checker, a package) writes no new venv.
    venv = 0 if places["venv"] in (found.get(places["venvs"]) or []) else int(footprint["venv_bytes"])
    own: list[Mapping[str, Any]] = [
        {
            "variable": "sglang_venv_root",
            "what": f"the SGLang {version} venv",
            "path": places["venv_root"],
            "bytes": venv,
            **free_space[places["venv_root"]],
        },
        {
            "variable": "sglang_venv_host_wheelhouse",
            "what": "its wheelhouse",
            "path": places["host_wheelhouse"],
            "bytes": wheelhouse,
            **free_space[places["host_wheelhouse"]],
        },
    ]
    by_device: dict[Any, list[Mapping[str, Any]]] = {}
    for need in own:
        by_device.setdefault(need["disk_device"], []).append(need)
    for other in other_needs:
        room = other.get("disk_free_bytes")
        if other.get("disk_device") in by_device and isinstance(room, int) and int(other["bytes"]) <= room:
            by_device[other["disk_device"]].append(other)
    problems = []
    for entries in by_device.values():
        total = sum(int(need["bytes"]) for need in entries)
        free = min(int(need["disk_free_bytes"]) for need in entries)
        if total <= free:
            continue
        parts = " + ".join(
            f"{need['what']} {_size(int(need['bytes']))} under {need['path']}" for need in entries if need["bytes"]
        )
        variables = list(dict.fromkeys(str(need["variable"]) for need in entries))
        problems.append(
            problem_line(
                host,
                "host",
                variables[0],
                entries[0]["path"],
                f"the deploy writes {parts} = {_size(total)} on the filesystem of {entries[0]['disk_path']}, "
                f"which has {_size(free)} free",
                "free space there, or set " + " / ".join(variables) + " to a filesystem with room"
                " (sglang_venv_keep_previous: fewer old venvs kept)",
            )
        )
    return problems


def sglang_venv_cache_room_problems(
    host: str, footprint: Mapping[str, int], installs: bool, complete: bool, cache: Mapping[str, Any], version: str
) -> list[str]:
    """Whether the control node has room to build the wheelhouse an install needs (`footprint.wheels_bytes` of wheels
    downloaded into `cache.path`, and as much again for the archive packed beside them), unless it is `complete`.
    `cache`: the cache directory (`path`) with its filesystem's free bytes (`disk_path`, `disk_free_bytes`)."""
    if not installs or complete or not footprint:
        return []
    need = 2 * int(footprint["wheels_bytes"])
    free = int(cache["disk_free_bytes"])
    if need <= free:
        return []
    return [
        problem_line(
            host,
            "host",
            "sglang_venv_wheelhouse_cache",
            cache["path"],
            f"the control node builds SGLang {version}'s wheelhouse there: {_size(need)} (the wheels and their "
            f"archive) on the filesystem of {cache['disk_path']}, which has {_size(free)} free",
            "free space on the control node, or set sglang_venv_wheelhouse_cache to a filesystem with room",
        )
    ]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_venv_problems": sglang_venv_problems,
            "sglang_venv_room_problems": sglang_venv_room_problems,
            "sglang_venv_cache_room_problems": sglang_venv_cache_room_problems,
        }
