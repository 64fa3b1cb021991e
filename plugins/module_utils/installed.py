"""What an install role would change on the host, and what else a role reads there, in one read-only pass.

Used by the module sglang_installed, and by sglang_instance_files for the reads that go with a comparison of files.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import systemd
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import free_bytes


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_distributions(venv: str) -> dict[str, str]:
    """name -> version of every distribution installed in the venv, from its .dist-info folders (no interpreter run)."""
    found: dict[str, str] = {}
    lib = os.path.join(venv, "lib")
    for python in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        site = os.path.join(lib, python, "site-packages")
        for entry in sorted(os.listdir(site)) if os.path.isdir(site) else []:
            if entry.endswith(".dist-info") and "-" in entry:
                name, version = entry.removesuffix(".dist-info").rsplit("-", 1)
                found[normalized(name)] = version
    return found


def venv_differences(venv: str, pins: Sequence[str]) -> list[str]:
    if not os.path.exists(os.path.join(venv, "bin/python")):
        return [f"{venv}: no venv"]
    installed = venv_distributions(venv)
    differences = []
    for pin in pins:
        name, _equals, version = pin.partition("==")
        have = installed.get(normalized(name))
        if have != version:
            differences.append(f"{venv}: {name} {version} is not installed" + (f" ({have} is)" if have else ""))
    return differences


def package_versions(names: Sequence[str], run: Any = subprocess.run) -> dict[str, str]:
    """name -> installed version, for the installed ones (dpkg's view)."""
    if not names:
        return {}
    result = run(
        ["dpkg-query", "--show", "--showformat=${Package}\t${Status}\t${Version}\n", *names],
        capture_output=True,
        text=True,
        check=False,
    )
    versions = {}
    for line in result.stdout.splitlines():
        name, status, version = [*line.split("\t"), "", ""][:3]
        if status.endswith(" installed"):
            versions[name.partition(":")[0]] = version
    return versions


def package_differences(packages: Mapping[str, str], run: Any = subprocess.run) -> list[str]:
    installed = package_versions(sorted(packages), run)
    differences = []
    for name, version in sorted(packages.items()):
        if name not in installed:
            differences.append(f"package {name}{'=' + version if version else ''} is not installed")
        elif version and installed[name] != version:
            differences.append(f"package {name}={version} is not installed ({installed[name]} is)")
    return differences


def path_differences(spec: Mapping[str, Any]) -> list[str]:
    path, state = str(spec["path"]), str(spec.get("state") or "file")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return [f"{path}: missing"]
    kinds = {"file": stat.S_ISREG, "directory": stat.S_ISDIR, "link": stat.S_ISLNK}
    if state in kinds and not kinds[state](info.st_mode):
        return [f"{path}: not a {state}"]
    differences = []
    if state == "link" and spec.get("src") is not None and os.readlink(path) != spec["src"]:
        differences.append(f"{path}: points to {os.readlink(path)}, not {spec['src']}")
    if state == "file" and spec.get("content") is not None:
        with open(path, "rb") as handle:
            if handle.read() != str(spec["content"]).encode():
                differences.append(f"{path}: content differs")
    if state == "file" and spec.get("sha256"):
        with open(path, "rb") as handle:
            if hashlib.sha256(handle.read()).hexdigest() != spec["sha256"]:
                differences.append(f"{path}: SHA-256 is not {spec['sha256']}")
    if spec.get("mode") and stat.S_IMODE(info.st_mode) != int(str(spec["mode"]), 8):
        differences.append(f"{path}: mode {stat.S_IMODE(info.st_mode):04o}, not {spec['mode']}")
    for key, lookup, have in (("owner", pwd.getpwnam, info.st_uid), ("group", grp.getgrnam, info.st_gid)):
        if spec.get(key):
            try:
                wanted = lookup(spec[key])[2]
            except KeyError:
                wanted = -1
            if have != wanted:
                differences.append(f"{path}: {key} is not {spec[key]}")
    return differences


def account_differences(spec: Mapping[str, Any]) -> list[str]:
    name = str(spec["name"])
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        return [f"user {name}: missing"]
    differences = []
    try:
        primary = grp.getgrnam(str(spec["group"])).gr_gid if spec.get("group") else user.pw_gid
    except KeyError:
        primary = -1
    if user.pw_gid != primary:
        differences.append(f"user {name}: primary group is not {spec['group']}")
    members = {group.gr_name for group in grp.getgrall() if name in group.gr_mem}
    for group in spec.get("groups") or []:
        if group not in members:
            differences.append(f"user {name}: not in group {group}")
    for key, have in (("home", user.pw_dir), ("shell", user.pw_shell)):
        if spec.get(key) and have != spec[key]:
            differences.append(f"user {name}: {key} is {have}, not {spec[key]}")
    return differences


def account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def mtimes(paths: Sequence[str]) -> dict[str, float]:
    """path -> modification time (Unix seconds) of each of `paths` that exists."""
    found = {}
    for path in paths:
        try:
            found[path] = os.stat(path).st_mtime
        except FileNotFoundError:
            continue
    return found


def free_space(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """path -> the nearest existing directory (`disk_path`), the bytes free on its filesystem and the filesystem's
    device number (`disk_device`)."""
    return {path: free_bytes(path) for path in paths}


def command_differences(spec: Mapping[str, Any], run: Any = subprocess.run) -> list[str]:
    argv = [str(word) for word in spec["argv"]]
    try:
        result = run(argv, capture_output=True, text=True, check=False, env={**os.environ, **(spec.get("environment") or {})})
    except OSError as exc:
        return [f"{' '.join(argv)}: {exc.strerror}"]
    if result.returncode != 0:
        return [f"{' '.join(argv)}: exit status {result.returncode}"]
    if spec.get("stdout") is not None and result.stdout.strip() != str(spec["stdout"]):
        return [f"{' '.join(argv)}: printed {result.stdout.strip()!r}, not {spec['stdout']!r}"]
    return []


def differences(params: Mapping[str, Any], run: Any = subprocess.run) -> list[str]:
    return _differences(params, [path_differences(spec) for spec in params.get("paths") or []], run)


def _differences(params: Mapping[str, Any], path_found: Sequence[list[str]], run: Any) -> list[str]:
    """The differences, with each of `params`' paths already compared (`path_found`, in their order)."""
    found = package_differences(params.get("packages") or {}, run)
    for venv in params.get("venvs") or []:
        found += venv_differences(str(venv["path"]), [str(pin) for pin in venv.get("pins") or []])
    for spec in params.get("accounts") or []:
        found += account_differences(spec)
    for lines in path_found:
        found += lines
    if not found:  # a command may need what is missing; run them only on an otherwise complete install
        for spec in params.get("commands") or []:
            found += command_differences(spec, run)
    return found


def probe(params: Mapping[str, Any], run: Any = subprocess.run) -> dict[str, Any]:
    """Everything the module returns: the differences, and what it reads (globs, units, times, accounts)."""
    paths = params.get("paths") or []
    path_found = [path_differences(spec) for spec in paths]  # each file read once, for both answers
    units = systemd.show(
        params.get("units") or [], params.get("unit_properties") or ["ActiveState", "UnitFileState"], ["--timestamp=us+utc"], run
    )
    return {
        "differences": _differences(params, path_found, run),
        "found": {pattern: sorted(glob.glob(pattern)) for pattern in params.get("globs") or []},
        "units": units,
        "mtimes": mtimes(params.get("mtimes") or []),
        "accounts": {str(spec["name"]): account_exists(str(spec["name"])) for spec in params.get("accounts") or []},
        "differing_paths": [str(spec["path"]) for spec, lines in zip(paths, path_found, strict=True) if lines],
        "free_space": free_space(params.get("free_space") or []),
    }
