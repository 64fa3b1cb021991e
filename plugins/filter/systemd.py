"""Ansible filters that quote values for systemd unit and environment files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")


def systemd_exec_quote(argv: Iterable[Any]) -> str:
    """An argv list as an ExecStart= line: every word survives systemd's splitting and expansion as given."""
    words = []
    for word in (str(item) for item in argv):
        # systemd expands $VAR and %specifiers in ExecStart; double them to keep them literal.
        word = word.replace("%", "%%").replace("$", "$$")
        if word == "" or _NEEDS_QUOTES.search(word):
            word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
        words.append(word)
    return " ".join(words)


def systemd_env_quote(value: Any) -> str:
    """A value for an EnvironmentFile= line (KEY=value), quoted when it needs to be."""
    text = str(value)
    if "\n" in text:
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


def systemd_utc_seconds(timestamp: str) -> float | None:
    """A `systemctl show --timestamp=us+utc` time ("Mon 2026-11-30 02:02:20.870662 UTC") as Unix seconds."""
    try:
        moment = datetime.strptime(timestamp.strip(), "%a %Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC).timestamp()


def sglang_server_stale(
    instances: list[dict[str, Any]], states: dict[str, dict[str, str]], changed_at: dict[str, float]
) -> list[dict[str, Any]]:
    """Running instances one of whose files (unit, environment file, key file: those of its verified set, as planned
    in its `files`) changed after their main process started.

    `states` as module sglang_installed reads them (`systemctl show --timestamp=us+utc`), `changed_at` each existing
    file's modification time in Unix seconds (its `mtimes`).
    """
    stale = []
    for instance in instances:
        state = states.get(instance["unit"], {})
        started = systemd_utc_seconds(state.get("ExecMainStartTimestamp", ""))
        if state.get("ActiveState") != "active" or started is None:
            continue
        if max(changed_at.get(path, 0.0) for path, _copy in instance["files"]["last_good"]) > started:
            stale.append(instance)
    return stale


def sglang_server_unit_properties(instance: dict[str, Any], sandbox: list[str]) -> list[str]:
    """An instance unit's confinement: the host-wide settings plus a DeviceAllow for each of its GPUs' nodes."""
    return [*sandbox, *(f"DeviceAllow={device} rw" for device in instance["gpu_devices"])]


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
        shown = value if variable != "sglang_api_key" else "<hidden>"
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


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "systemd_exec_quote": systemd_exec_quote,
            "systemd_env_quote": systemd_env_quote,
            "systemd_hardening": systemd_hardening,
            "sglang_server_stale": sglang_server_stale,
            "sglang_server_unit_properties": sglang_server_unit_properties,
            "systemd_text_problems": systemd_text_problems,
        }
