"""Running a command as a unit would: its account, sandbox and environment (systemd-run --wait --pipe).

Preflight's checks that run the runtime's code (the CUDA smoke check, the parser check, which loads the model's
config and, with trust-remote-code, its own Python) run so, never as root: the properties are the instance unit's
(module_utils of the filter sglang_server_unit_properties), the environment is written to a 0600 file systemd reads.
"""

from __future__ import annotations

import os
import tempfile


def environment_file(environment: dict[str, str], directory: str) -> str:
    """The environment as a 0600 file systemd reads (values quoted as in the units' environment files)."""
    handle, path = tempfile.mkstemp(prefix="sglang-check-", suffix=".env", dir=directory)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        for name, value in sorted(environment.items()):
            text = str(value).replace("\\", "\\\\").replace('"', '\\"')
            out.write(f'{name}="{text}"\n')
    return path


class RunsAsRoot(ValueError):
    """The properties name no account other than root: the runtime's code would run as root. Nothing was run."""


def account(properties: list[str]) -> str | None:
    """The account `properties` run the unit as (its last User=), None without one."""
    users = [item.split("=", 1)[1].strip() for item in properties if item.startswith("User=")]
    return users[-1] if users else None


def require_account(properties: list[str]) -> None:
    """RunsAsRoot unless `properties` name an account other than root (without User= a transient unit runs as root).
    Callers ask before they write the environment file."""
    if account(properties) in (None, "", "root", "0"):
        raise RunsAsRoot(f"refusing to run the runtime's code as root: the unit's properties {properties} name no other account")


def systemd_run(unit: str, properties: list[str], env_file: str, command: list[str]) -> list[str]:
    """The systemd-run command line that runs `command` in a transient unit `unit` with `properties`, waits for it and
    pipes its standard streams; nothing of the caller's environment reaches it (systemd starts it afresh). Refused
    (require_account) unless the properties name an account other than root."""
    require_account(properties)
    options = [f"--property={item}" for item in [*properties, f"EnvironmentFile={env_file}"]]
    return ["systemd-run", "--wait", "--pipe", "--quiet", "--collect", f"--unit={unit}", *options, "--", *command]
