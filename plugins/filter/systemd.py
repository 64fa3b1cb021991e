"""Ansible filters that quote values for systemd unit and environment files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line
from ansible_collections.sglang.fleet.plugins.module_utils.role_decisions import server_units
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import secret_dest

_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")


def systemd_exec_quote(argv: Iterable[Any]) -> str:
    """An argv list as an ExecStart= line: every word survives systemd's splitting and expansion as given."""
    words = []
    for word in (str(item) for item in argv):
        character = _control_character(word)
        if character:
            # A newline ends the unit line whatever the quoting: what follows would be a line of its own (run as root
            # after ExecStartPre=+). Preflight names the variable first; this is the last guard.
            raise ValueError(f"{json.dumps(word)}: the control character {character} cannot be in a unit's command line")
        # systemd expands $VAR and %specifiers in ExecStart; double them to keep them literal.
        word = word.replace("%", "%%").replace("$", "$$")
        if word == "" or _NEEDS_QUOTES.search(word):
            word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
        words.append(word)
    return " ".join(words)


def systemd_env_quote(value: Any) -> str:
    """A value for an EnvironmentFile= line (KEY=value), quoted when it needs to be."""
    text = str(value)
    if "\n" in text or "\r" in text or "\x00" in text:
        raise ValueError("environment values cannot span lines")
    if text == "" or _NEEDS_QUOTES.search(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


# The sandbox every sglang-fleet unit runs in (instances and router alike), after its account and device lines.
HARDENING = (
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "PrivateTmp=yes",
    "ProtectSystem=strict",
    "ReadWritePaths={paths}",
    "ProtectHome=yes",
    "ProtectProc=invisible",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "KeyringMode=private",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallErrorNumber=EPERM",
)


def systemd_hardening(read_write_paths: Iterable[str], private_devices: bool = False) -> list[str]:
    """The unit lines of the fleet's sandbox: writable only `read_write_paths`; `private_devices` for a unit that
    needs no device at all (the router; the instances allow their GPUs' nodes instead)."""
    lines = [line.format(paths=" ".join(read_write_paths)) for line in HARDENING]
    return [*lines[:4], "PrivateDevices=yes", *lines[4:]] if private_devices else lines


def sglang_server_unit_properties(instance: dict[str, Any], sandbox: list[str]) -> list[str]:
    """An instance unit's confinement: the host-wide settings plus a DeviceAllow for each of its GPUs' nodes."""
    return [*sandbox, *(f"DeviceAllow={device} rw" for device in instance["gpu_devices"])]


def sglang_server_host_properties(instances: list[dict[str, Any]], sandbox: list[str]) -> list[str]:
    """The confinement of a check made once for the host's instances (preflight's parser check): the host-wide
    settings plus a DeviceAllow for each GPU node of any planned instance."""
    devices = sorted({device for instance in instances for device in instance.get("gpu_devices") or []})
    return sglang_server_unit_properties({"gpu_devices": devices}, sandbox)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _control_character(value: Any) -> str | None:
    """The first control character (below 0x20, or DEL) in a string, a mapping's keys and values or a list's items."""
    if isinstance(value, str):
        found = _CONTROL.search(value)
        return f"U+{ord(found.group()):04X}" if found else None
    items: list[Any] = []
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    return next((found for found in map(_control_character, items) if found), None)


def systemd_text_problems(host: str, variables: dict[str, Any], no_spaces: Iterable[str] = (), where: str = "host") -> list[str]:
    """One problem per variable whose text reaches a unit or environment file with a control character in it,
    and per entry of a `no_spaces` list variable holding whitespace (ReadWritePaths= splits on it). `where` names
    the part of the host the variables belong to (the servers: "host"; "router")."""
    problems = []
    spaced = set(no_spaces)
    for variable, value in variables.items():
        secret_keys = isinstance(value, dict) and any(secret_dest(str(key).lstrip("-").replace("-", "_")) for key in value)
        shown = "<hidden>" if variable == "sglang_api_key" or secret_keys else value
        character = _control_character(value)
        if character:
            problems.append(
                problem_line(
                    host,
                    where,
                    variable,
                    shown,
                    f"contains the control character {character}, which would inject a line into (or break) the rendered unit "
                    "or environment file",
                    "remove the control character",
                )
            )
        elif variable in spaced:
            for entry in value if isinstance(value, list) else [value]:
                if isinstance(entry, str) and re.search(r"\s", entry):
                    problems.append(
                        problem_line(
                            host,
                            where,
                            variable,
                            shown,
                            f"entry {json.dumps(entry)} contains whitespace, which splits it into two paths in ReadWritePaths=",
                            "use a path without spaces (e.g. a symlink to it)",
                        )
                    )
    return problems


# Where a sandboxed unit's writes do not outlive a restart (PrivateTmp=yes gives every start an empty /tmp and
# /var/tmp), are hidden from it (ProtectHome=yes: /home, /root and /run/user are empty and read-only to it), or live in
# memory and go at a reboot (/run, /dev/shm are tmpfs on systemd hosts).
_NOT_KEPT = (
    ("/tmp", "PrivateTmp=yes gives each start of the unit an empty /tmp, so every restart compiles its kernels again"),
    ("/var/tmp", "PrivateTmp=yes gives each start of the unit an empty /var/tmp, so every restart compiles again"),
    ("/home", "ProtectHome=yes hides /home from the unit: it cannot write its caches there"),
    ("/root", "ProtectHome=yes hides /root from the unit: it cannot write its caches there"),
    ("/run", "/run is a tmpfs: the caches go at every reboot (and /run/user is hidden by ProtectHome=yes)"),
    ("/dev/shm", "/dev/shm is a tmpfs: the caches go at every reboot"),
)


def sglang_cache_dir_warnings(
    path: str, host: str, variable: str = "sglang_server_cache_dir", tmpfs: Iterable[str] = ()
) -> list[str]:
    """Warnings, one line each, when the kernel/compile cache directory `path` would not survive an instance's restart
    (or a reboot) in the fleet's sandbox: under /tmp or /var/tmp (PrivateTmp), /home or /root (ProtectHome), /run or
    /dev/shm, or under any of the mount points `tmpfs` names (the host's tmpfs mounts, when known)."""
    clean = "/" + str(path).strip("/")
    found = [cause for root, cause in _NOT_KEPT if clean == root or clean.startswith(root + "/")]
    found += [
        f"{mount} is a tmpfs mount: the caches go at every reboot"
        for mount in tmpfs
        if mount not in ("/", "") and (clean == mount.rstrip("/") or clean.startswith(mount.rstrip("/") + "/"))
    ]
    return [f"{host}: {variable}={path}: {cause}; fix: a persistent directory such as /var/cache/sglang" for cause in found]


def sglang_cache_dir_problems(path: str, host: str, home: str, read_write_paths: Iterable[str] = ()) -> list[str]:
    """Refusals, one line each, of a kernel/compile cache directory `path` inside a folder the servers' account can
    write (its `home`, or one of `read_write_paths`): root creates and chowns the cache directory (following a link
    there) and the removal deletes it, so the account could plant a link in its place and hand itself what it names."""

    def clean(value: str) -> str:
        return "/" + str(value).strip("/")

    target = clean(path)
    writable = [("sglang_server_home", home)] + [("sglang_server_read_write_paths", entry) for entry in read_write_paths]
    return [
        problem_line(
            host,
            "host",
            "sglang_server_cache_dir",
            path,
            f"it is inside {variable} {folder}, which the servers' account can write: root creates, chowns and removes "
            "the cache directory, through a link the account could plant there",
            "a directory of its own whose parents only root writes, such as /var/cache/sglang",
        )
        for variable, folder in writable
        if folder and clean(folder) != "/" and (target == clean(folder) or target.startswith(clean(folder) + "/"))
    ]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "systemd_exec_quote": systemd_exec_quote,
            "systemd_env_quote": systemd_env_quote,
            "systemd_hardening": systemd_hardening,
            "sglang_server_units": server_units,
            "sglang_server_unit_properties": sglang_server_unit_properties,
            "sglang_server_host_properties": sglang_server_host_properties,
            "systemd_text_problems": systemd_text_problems,
            "sglang_cache_dir_warnings": sglang_cache_dir_warnings,
            "sglang_cache_dir_problems": sglang_cache_dir_problems,
        }
