"""A host's SGLang settings checked before they become command lines and environment files: server args and
speculative settings against the pinned version's flags, environment variables, the fleet-managed and secret options,
control characters, and variable names no role reads."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.flags import flag_name
from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems
from ansible_collections.sglang.fleet.plugins.module_utils.sglang_support import (
    HIDDEN,
    Support,
    check_flag,
    secret_dest,
    secret_flag,
    since,
)

# SGLang's own spelling of the flags this project renders from dedicated variables.
MANAGED_FLAGS: dict[str, str] = {
    "--model-path": "sglang_model_path",
    "--served-model-name": "sglang_served_model_name",
    "--host": "sglang_listen_host",
    "--port": "sglang_port_base",
    "--nccl-port": "sglang_nccl_port_base",
    "--tp-size": "sglang_tensor_parallel_size",
    "--dp-size": "sglang_data_parallel_size",
    "--pp-size": "sglang_pipeline_parallel_size",
    "--base-gpu-id": "sglang_gpu_ids",
    "--enable-metrics": "sglang_enable_metrics",
}
# Fixes for the fleet-managed settings that have no variable of their own.
MANAGED_FIXES: dict[str, str] = {
    "--config": "put each setting in sglang_server_args (sglang-fleet passes --config itself, with sglang_api_key's file)",
    # An instance across hosts: its nodes, ranks and rendezvous come from one declaration (module_utils/multinode.py).
    **dict.fromkeys(
        ("--nnodes", "--node-rank", "--dist-init-addr"),
        "list the hosts in an sglang_instance_groups entry's nodes"
        " (README: An instance across hosts); sglang-fleet passes the node flags to every node",
    ),
}
# Environment that makes torch.distributed span hosts another way (SGLang reads SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE,
# torch's env:// the others).
MULTINODE_ENVIRONMENT = frozenset(
    ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE")
)
# Any character below 0x20 and DEL: in a unit or environment file it starts a new line or breaks the value.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
# Speculative settings SGLang 0.5.23 overrides whatever is given (arg_groups/speculative_hook.py): algorithm -> key ->
# (the one value it keeps, what it sets instead). None: no value is kept.
SGLANG_RESOLVES: dict[str, dict[str, tuple[Any, str]]] = {
    "NGRAM": {"eagle_topk": (None, "--speculative-ngram-max-bfs-breadth (default 10)")},
    "DFLASH": {"num_steps": (1, "1"), "eagle_topk": (1, "1")},
    "DSPARK": {"num_steps": (1, "1"), "eagle_topk": (1, "1")},
}


def speculative_flags(
    problems: HostProblems, support: Support, where: str, variable: str, speculative: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Checks speculative settings the way SGLang 0.5.23 resolves them; returns the flags, or None."""
    if not speculative:
        return {}
    algorithm = speculative.get("algorithm")
    if algorithm not in support.speculative_algorithms:
        options = ", ".join(sorted(support.speculative_algorithms))
        having = support.versions_with(lambda other: algorithm in other.speculative_algorithms)
        problems.add(
            where,
            f"{variable}.algorithm",
            algorithm,
            f"SGLang {support.version} knows {options}" + (f" ({since(having)} knows {algorithm})" if having else ""),
            "pick one" + (f" or pin sglang_version {having[0]}" if having else ""),
        )
        return None
    flags: dict[str, Any] = {}
    valid = True
    for key, value in speculative.items():
        flag = "--speculative-" + key.replace("_", "-")
        if not check_flag(problems, support, where, f"{variable}.{key}", flag, value):
            valid = False
        flags[flag] = value
    for key, (allowed, resolved) in SGLANG_RESOLVES.get(algorithm, {}).items():
        if valid and key in speculative and speculative[key] != allowed:
            problems.add(
                where,
                f"{variable}.{key}",
                speculative[key],
                f"SGLang {support.version} sets {algorithm}'s {key} to {resolved} and ignores this value (the"
                " rollout's check of /server_info would then fail)",
                f"remove {key}" + ("; set ngram_max_bfs_breadth instead" if algorithm == "NGRAM" else ""),
            )
            valid = False
    if not valid or algorithm not in EAGLE_FAMILY:
        return flags if valid else None
    steps = speculative.get("num_steps")
    topk = speculative.get("eagle_topk")
    draft = speculative.get("num_draft_tokens")
    if steps is None and (topk is not None or draft is not None):
        problems.add(
            where,
            f"{variable}.num_steps",
            None,
            f"SGLang {support.version} stops at start when eagle_topk or num_draft_tokens is set without num_steps",
            "set num_steps, eagle_topk and num_draft_tokens together (or none of them for SGLang's choice)",
        )
        return None
    for key, value in (("num_steps", steps), ("eagle_topk", topk), ("num_draft_tokens", draft)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.add(where, f"{variable}.{key}", value, "must be an integer >= 1", f"set {key} to a whole number")
            return None
    if steps is not None and topk == 1 and draft is not None and draft != steps + 1:
        problems.add(
            where,
            f"{variable}.num_draft_tokens",
            draft,
            f"with eagle_topk 1 SGLang verifies num_steps + 1 = {steps + 1} tokens and ignores this value",
            f"set num_draft_tokens: {steps + 1}",
        )
        return None
    if steps is not None and topk is None:
        problems.add(
            where, f"{variable}.eagle_topk", None, "num_steps is set without eagle_topk", "set eagle_topk (1 for a chain)"
        )
        return None
    return flags


def checked_args(
    problems: HostProblems, support: Support, where: str, variable: str, server_args: Mapping[str, Any]
) -> dict[str, Any] | None:
    flags: dict[str, Any] = {}
    valid = True
    managed = _managed_dests(support)
    for key, value in server_args.items():
        flag = flag_name(str(key))
        known = support.flags.get(flag)
        dest = known.dest if known else ""
        shown = HIDDEN if secret_flag(support, flag) else value  # a value that may be a secret is never printed
        if dest and secret_dest(dest):
            problems.add(
                where,
                f"{variable}.{key}",
                HIDDEN,
                f"{flag} is a secret: in sglang_server_args it would be written into the world-readable unit, "
                "shown by --diff and visible in /proc",
                "keep it in ansible-vault as sglang_api_key"
                if dest in ("api_key", "admin_api_key")
                else "remove it (only sglang_api_key, from ansible-vault, reaches SGLang, through a root-only file)",
            )
            valid = False
        elif flag in MANAGED_FLAGS or flag in MANAGED_FIXES or (dest and dest in managed):
            canonical, fix = managed.get(dest) or (flag, MANAGED_FIXES.get(flag) or f"use {MANAGED_FLAGS[flag]}")
            alias = f" (an alias of {canonical})" if canonical != flag else ""
            problems.add(where, f"{variable}.{key}", shown, f"{flag}{alias} is set by sglang-fleet", fix)
            valid = False
        elif flag.startswith("--speculative-"):
            problems.add(
                where, f"{variable}.{key}", shown, "speculative settings have their own variable", "use sglang_speculative"
            )
            valid = False
        elif str(key) != flag.removeprefix("--"):
            # One spelling, SGLang's own: a key written another way (snake case, or with --) would name the same flag
            # as its other spelling, escape the checks that read the key as written, and render the flag twice.
            problems.add(
                where,
                f"{variable}.{key}",
                shown,
                f"keys are SGLang's flags without -- and with - between words, as `--help` lists them ({flag})",
                f"write {flag.removeprefix('--')}",
            )
            valid = False
        elif check_flag(problems, support, where, f"{variable}.{key}", flag, value):
            flags[flag] = value
        else:
            valid = False
    return flags if valid else None


def _managed_dests(support: Support) -> dict[str, tuple[str, str]]:
    """{argparse dest: (flag, fix)} of every fleet-managed option, so its aliases (--model, --tensor-parallel-size) count too."""
    managed: dict[str, tuple[str, str]] = {}
    for flag, variable in MANAGED_FLAGS.items():
        known = support.flags.get(flag)
        if known and known.dest:
            managed[known.dest] = (flag, f"use {variable}")
    for flag, fix in MANAGED_FIXES.items():
        known = support.flags.get(flag)
        if known and known.dest:
            managed[known.dest] = (flag, fix)
    return managed


def truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def control_character(value: Any) -> str | None:
    """The first control character in a value (its strings, a mapping's keys and values, a list's items), if any."""
    if isinstance(value, str):
        found = CONTROL.search(value)
        return f"U+{ord(found.group()):04X}" if found else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            found_key = control_character(key) if isinstance(key, str) else None
            if found_key or (found_key := control_character(item)):
                return found_key
    elif isinstance(value, (list, tuple)):
        for item in value:
            if found_item := control_character(item):
                return found_item
    return None


# The plan's settings that reach a rendered file (unit, environment file), by variable.
TEXT_SETTINGS = (
    ("model_path", "sglang_model_path"),
    ("served_model_name", "sglang_served_model_name"),
    ("listen_host", "sglang_listen_host"),
    ("server_args", "sglang_server_args"),
    ("speculative", "sglang_speculative"),
    ("environment", "sglang_environment"),
    ("instance_overrides", "sglang_instance_overrides"),
    ("venv_root", "sglang_venv_root"),
    ("runtime_environment", "sglang_venv_runtime_environment"),
    ("cuda_home", "cuda_home"),
)


def _shown(support: Support, setting: str, key: Any, item: Any) -> Any:
    """What a problem shows of a setting's entry: <hidden> where a flag in it may be a secret (secret_flag)."""
    args = {key: item} if setting == "server_args" else item.get("server_args") if setting == "instance_overrides" else None
    if isinstance(args, Mapping) and any(secret_flag(support, flag_name(str(name))) for name in args):
        return HIDDEN
    return item


def control_problems(problems: HostProblems, settings: Mapping[str, Any], support: Support) -> bool:
    """One problem per variable (per key of a mapping) holding a control character; True when there was one. A value
    that may hold a secret (a flag named like one, or nearest to one) is shown as <hidden>."""
    found = False
    for setting, variable in TEXT_SETTINGS:
        value = settings.get(setting)
        entries = value.items() if isinstance(value, Mapping) else [(None, value)]
        for key, item in entries:
            character = control_character(key) if isinstance(key, str) else None
            character = character or control_character(item)
            if character:
                found = True
                shown_key = str(key).encode("unicode_escape").decode("ascii")  # the line stays one line
                problems.add(
                    "host",
                    variable if key is None else f"{variable}.{shown_key}",
                    _shown(support, setting, key, item),
                    f"contains the control character {character}, which would inject a line into (or break) the "
                    "rendered unit or environment file",
                    "remove the control character (newline, tab, escape ...)",
                )
    return found


ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables that change how programs load code: a service's environment must not steer its root helpers.
LOADER_PREFIXES = ("LD_", "PYTHON")


def check_environment(
    problems: HostProblems, support: Support, where: str, variable: str, environment: Mapping[str, Any]
) -> None:
    for name, value in environment.items():
        if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
            problems.add(where, f"{variable}.{name}", value, "not a valid environment variable name", "use letters, digits and _")
        elif name.startswith(LOADER_PREFIXES):
            problems.add(
                where,
                f"{variable}.{name}",
                value,
                "LD_* and PYTHON* variables change what code the server (and its root start-up check) loads",
                f"remove {name}; install libraries into the venv or the system instead",
            )
        elif name in support.removed_environment:
            replacement = support.removed_environment[name]
            fix = f"use {replacement}" if replacement else f"remove {name}"
            still = support.versions_reading(name)
            problems.add(
                where,
                f"{variable}.{name}",
                value,
                f"SGLang {support.version} no longer reads it and ignores it silently"
                + (f" ({since(still)} reads it)" if still else ""),
                fix,
            )
        elif name in MULTINODE_ENVIRONMENT:
            problems.add(
                where,
                f"{variable}.{name}",
                value,
                "an instance spans hosts only as sglang-fleet plans it (ranks, rendezvous, every node restarted together)",
                f"remove {name}; list the hosts in an sglang_instance_groups entry's nodes (README: An instance across hosts)",
            )
        elif name.startswith(("SGLANG_", "SGL_")) and not support.knows_environment(name):
            having = support.versions_reading(name)
            if having:
                problems.add(
                    where,
                    f"{variable}.{name}",
                    value,
                    f"SGLang {support.version} does not read {name} and would ignore it silently ({since(having)} reads it)",
                    f"remove {name} or pin sglang_version {having[0]}",
                )
        elif name == "CUDA_VISIBLE_DEVICES":
            problems.add(
                where, f"{variable}.{name}", value, "GPUs are given to each instance by sglang-fleet", "use sglang_gpu_ids"
            )


def unknown_variable_problems(problems: HostProblems, names: Any, known: frozenset[str]) -> None:
    """A sglang_*/cuda_* variable the host has that no role reads (none of the `known` names): a typo silently changes
    nothing."""
    if not names or isinstance(names, str):
        return
    for name in sorted({str(name) for name in names if re.match(r"(sglang|cuda)_", str(name))} - known):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        problems.lines.append(
            f"{problems.host} host: {name}: no role of sglang-fleet reads this variable, so it changes nothing"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; fix: {'rename it to ' + close[0] if close else 'correct its name or remove it'}"
        )
