"""The runtime's own parser check of each instance's command line: what it reads, and its refusals as problems."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems


def checked_command_lines(instances: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What preflight's parser check reads: each instance's exact argv, and the config file it may stand in for."""
    return {
        str(instance["name"]): {"argv": list(instance["argv"]), "stand_in_config": instance.get("config_file")}
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


def parse_problems(instances: Sequence[Mapping[str, Any]], checked: Mapping[str, Any], host: str) -> list[str]:
    """One problem line per instance whose command line the runtime's own parser refused.

    `checked` is the registered result of files/check_server_args.py ({name: {rc, error}} on stdout).
    Every refused command line counts: argparse's refusal (rc 2) and a settings check that raised (rc 1),
    as SGLang would at start. A checker that could not run at all means a venv the deploy is about to
    repair, which is no reason to refuse the deploy.
    """
    if checked.get("rc") != 0 or not checked.get("stdout"):
        return []
    verdicts = json.loads(checked["stdout"])
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
