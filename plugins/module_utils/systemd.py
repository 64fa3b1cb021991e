"""systemd as every module and filter of sglang.fleet reads it: `systemctl show`, parsed once, here."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from typing import Any


def parse_show(output: str) -> dict[str, dict[str, str]]:
    """`systemctl show --property=Id,... unit...` output as {unit: {property: value}} (blocks keyed by their Id)."""
    states: dict[str, dict[str, str]] = {}
    for block in output.strip().split("\n\n"):
        properties = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if properties.get("Id"):
            states[properties["Id"]] = properties
    return states


def show(
    units: Sequence[str],
    properties: Sequence[str],
    options: Sequence[str] = (),
    run: Callable[..., Any] = subprocess.run,
) -> dict[str, dict[str, str]]:
    """The units' properties in one `systemctl show`: {unit: {property: value}}; a unit systemd does not know has
    empty values (systemctl answers for it all the same)."""
    if not units:
        return {}
    argv = ["systemctl", "show", *options, "--property=Id", *(f"--property={name}" for name in properties), *units]
    found = parse_show(run(argv, capture_output=True, text=True, check=False).stdout)
    return {unit: {name: found.get(unit, {}).get(name, "") for name in properties} for unit in units}
