"""The runtime's own parser check of each instance's command line: what it reads, and its refusals as problems."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems


def checked_command_lines(instances: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What preflight's parser check reads: each instance's exact argv, the config file it may stand in for, and the
    files SGLang only checks exist while parsing (its TLS certificate and key), stood in for too."""
    return {
        str(instance["name"]): {
            "argv": list(instance["argv"]),
            "stand_in_config": instance.get("config_file"),
            "stand_in_files": list(instance.get("tls_files") or []),
        }
        for instance in instances
    }


def _variable_of(instance: Mapping[str, Any], flag: str) -> tuple[str, Any]:
    """The variable and value behind a rendered flag of an instance."""
    for key, value in instance.get("settings", {}).items():
        if flag_name(str(key)) == flag:
            return f"sglang_server_args.{key}", value
    for key, value in instance.get("speculative", {}).items():
        if "--speculative-" + key.replace("_", "-") == flag:
            return f"sglang_speculative.{key}", value
    return "command line", flag


def parse_problems(
    instances: Sequence[Mapping[str, Any]], checked: Mapping[str, Any], host: str, repairs_runtime: bool = False
) -> list[str]:
    """One problem line per instance whose command line the runtime's own parser refused.

    `checked` is the registered result of files/check_server_args.py ({name: {rc, error}}, its last line of stdout:
    what the model's code or a library printed before it is not the verdict). Every refused command line counts:
    argparse's refusal (rc 2) and a settings check that raised (rc 1), as SGLang would at start. A checker that could
    not run at all (its sandbox did not start, it crashed, it timed out) is a problem of the host, naming why: servers
    are never restarted with command lines nobody parsed. Except where this deploy repairs the runtime
    (`repairs_runtime`: it installs it again, then parses with it before any server starts).
    """
    if checked.get("skipped") or "rc" not in checked:
        return []
    lines = [line for line in str(checked.get("stdout") or "").splitlines() if line.strip()]
    try:
        verdicts = json.loads(lines[-1]) if checked["rc"] == 0 and lines else None
    except ValueError:
        verdicts = None
    if not isinstance(verdicts, dict):
        if repairs_runtime:
            return []
        why = [line.strip() for line in str(checked.get("stderr") or "").splitlines() if line.strip()]
        problems = HostProblems(host=host)
        problems.add(
            "host",
            "sglang_version",
            None,
            f"the runtime's parser check could not run (exit {checked['rc']}: {why[-1] if why else 'no verdict'})",
            "see that the servers' account and sandbox can run the venv's Python (systemd-run), or repair the venv",
        )
        return problems.lines
    problems = HostProblems(host=host)
    for instance in instances:
        verdict = verdicts.get(instance["name"], {})
        if verdict.get("rc", 0) == 0:
            continue
        lines = [line.strip() for line in str(verdict.get("error", "")).splitlines() if line.strip()]
        message = " ".join(line for line in lines if "error:" in line) or (lines[-1] if lines else f"exit {verdict['rc']}")
        flags = re.findall(r"--[A-Za-z0-9][\w-]*", message)
        variable, value = _variable_of(instance, flags[0]) if flags else ("command line", None)
        problems.add(
            f"instance {instance['name']}",
            variable,
            value,
            f"SGLang's parser refused it: {message}",
            "correct or remove that setting",
        )
    return problems.lines
