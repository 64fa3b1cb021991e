"""Ansible filters that quote values for systemd unit and environment files."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

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


def systemd_show_states(output: str) -> dict[str, dict[str, str]]:
    """`systemctl show --property=Id,... unit...` output as {unit: {property: value}}."""
    states: dict[str, dict[str, str]] = {}
    for block in output.strip().split("\n\n"):
        properties = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if properties.get("Id"):
            states[properties["Id"]] = properties
    return states


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "systemd_exec_quote": systemd_exec_quote,
            "systemd_env_quote": systemd_env_quote,
            "systemd_show_states": systemd_show_states,
        }
