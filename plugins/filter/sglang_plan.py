"""The fleet's one data model: a host's SGLang settings and facts become its instances and its problems.

`sglang_plan(settings, facts, tables)` returns {"instances": [...], "problems": [...]}. Every other role
reads the instances; preflight fails the deploy when any host has a problem. Each problem is one line
naming host, instance, variable, value and fix. `tables` are the support tables of every SGLang version
sglang-fleet supports (roles/sglang_plan/files/sglang-<version>.json); settings["version"] picks the pinned one,
and the others say what a host moving between versions gains or loses.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.listen import connect_host, is_loopback
from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

GIB = 1024**3
MIB = 1024**2

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
}
# Options whose value is a secret: in sglang_server_args it would land in the 0644 unit, in --diff and in /proc.
SECRET_DESTS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})
SECRET_DEST = re.compile(r"(^|_)(api_key|password|passwd|secret|credentials?)($|_)")
# Any character below 0x20 and DEL: in a unit or environment file it starts a new line or breaks the value.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Bounds SGLang (or any careful operator) holds values to, by argparse dest (so aliases count):
# dest: (minimum, exclusive maximum or None, whether the minimum itself is excluded, what the value must be).
VALUE_BOUNDS: dict[str, tuple[float, float | None, bool, str]] = {
    "mem_fraction_static": (0, 1, True, "must be between 0 and 1 (exclusive)"),
    "max_running_requests": (1, None, False, "must be at least 1"),
    "context_length": (1, None, False, "must be at least 1"),
    "max_total_tokens": (1, None, False, "must be at least 1"),
    "max_prefill_tokens": (1, None, False, "must be at least 1"),
    "hicache_ratio": (0, None, True, "must be above 0"),
    "hicache_size": (0, None, False, "must not be negative"),
}
ALLOW_LONGER_CONTEXT = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
# MTP checkpoints carry their draft layer as `mtp.*` tensors and count it in one of these config keys.
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


@dataclass
class Flag:
    """One option of SGLang's argument parser, as recorded in the support table."""

    option: str
    takes_value: bool
    choices: list[Any] | None
    many: bool
    type: str | None
    dest: str = ""
    deprecated: bool = False


@dataclass
class Support:
    """What the pinned SGLang version knows: flags, renamed flags, architectures, algorithms."""

    version: str
    flags: dict[str, Flag]
    renamed_flags: dict[str, str]
    removed_flags: frozenset[str]
    removed_environment: dict[str, str]
    architectures: frozenset[str]
    speculative_algorithms: frozenset[str]
    environment_names: frozenset[str] = frozenset()
    # The support of the other versions sglang-fleet has tables for, newest first.
    others: tuple[Support, ...] = ()

    def knows_environment(self, name: str) -> bool:
        """True when this version's source mentions `name` (names ending in "_" are prefixes it reads)."""
        return name in self.environment_names or any(
            known.endswith("_") and name.startswith(known) for known in self.environment_names
        )

    def versions_with(self, has: Callable[[Support], bool]) -> list[str]:
        """The other versions for which `has` is true, newest first."""
        return [other.version for other in self.others if has(other)]

    def versions_reading(self, name: str) -> list[str]:
        """The other versions that read the environment variable `name`, newest first."""
        return [other.version for other in self.others if other.knows_environment(name)]

    @classmethod
    def load(cls, table: Mapping[str, Any]) -> Support:
        flags: dict[str, Flag] = {}
        for action in table["flags"]:
            nargs = action.get("nargs")
            takes_value = action.get("action", "store") in ("store", "append", "deprecated_alias_store") and nargs != 0
            for option in action["option_strings"]:
                if option.startswith("--"):
                    flags[option] = Flag(
                        option=option,
                        takes_value=takes_value,
                        choices=action.get("choices"),
                        many=nargs in ("+", "*") or action.get("action") == "append",
                        type=action.get("type"),
                        dest=str(action.get("dest", "")),
                        deprecated=str(action.get("action", "")).startswith("deprecated"),
                    )
        replacements = table.get("removed_environment_replacements", {})
        removed = {name: replacements.get(name, "") for name in table.get("removed_environment", [])}
        return cls(
            version=str(table["sglang_version"]),
            flags=flags,
            renamed_flags=dict(table.get("renamed_flags", {})),
            removed_flags=frozenset(table.get("removed_flags", [])),
            removed_environment=dict(removed),
            architectures=frozenset(table["architectures"]),
            speculative_algorithms=frozenset(table["speculative_algorithms"]),
            environment_names=frozenset(table.get("environment_names", [])),
        )


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def _pinned_support(plan: Plan, version: str, tables: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> Support | None:
    """The pinned version's support, knowing the other versions; None (with one problem) when there is no table."""
    listed = [tables] if isinstance(tables, Mapping) else list(tables)
    supports = sorted((Support.load(table) for table in listed), key=lambda s: _version_key(s.version), reverse=True)
    by_version = {support.version: support for support in supports}
    if not version and len(supports) == 1:
        version = supports[0].version
    pinned = by_version.get(version)
    if pinned is None:
        known = ", ".join(sorted(by_version, key=_version_key)) or "none"
        plan.problem(
            "host",
            "sglang_version",
            version,
            f"sglang-fleet has no support table for SGLang {version} (supported: {known})",
            "pin one of the supported versions",
        )
        return None
    pinned.others = tuple(support for support in supports if support is not pinned)
    return pinned


def _since(versions: Sequence[str]) -> str:
    return ", ".join(f"SGLang {version}" for version in versions)


@dataclass
class Plan:
    """Collects the problems of one host while its instances are derived and checked."""

    host: str
    problems: list[str] = field(default_factory=list)

    def problem(self, where: str, variable: str, value: Any, message: str, fix: str) -> None:
        self.problems.append(problem_line(self.host, where, variable, value, message, fix))


def _flag_name(key: str) -> str:
    return key if key.startswith("--") else "--" + key.replace("_", "-")


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def render_flag(flag: str, value: Any) -> list[str]:
    """One setting as argv words: true is a bare flag, false and null leave it out, lists repeat values."""
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    if isinstance(value, list):
        return [flag, *(_format_value(item) for item in value)]
    return [flag, _format_value(value)]


def _check_flag(plan: Plan, support: Support, where: str, variable: str, flag: str, value: Any) -> bool:
    """True when `flag` is a flag the pinned SGLang knows and `value` fits it; otherwise records why not."""
    if flag in support.renamed_flags:
        still = support.versions_with(lambda other: _has_flag(other, flag))
        plan.problem(
            where,
            variable,
            value,
            f"{flag} does not exist in SGLang {support.version}" + (f" ({_since(still)} has it)" if still else ""),
            f"use {support.renamed_flags[flag]}" + (f" or pin sglang_version {still[0]}" if still else ""),
        )
        return False
    if flag in support.removed_flags:
        still = support.versions_with(lambda other: _has_flag(other, flag))
        plan.problem(
            where,
            variable,
            value,
            f"{flag} was removed in SGLang {support.version}" + (f" ({_since(still)} has it)" if still else ""),
            "remove the setting" + (f" or pin sglang_version {still[0]}" if still else ""),
        )
        return False
    known = support.flags.get(flag)
    if known is None:
        # Known to another supported version: say which, and what this version calls it, if anything.
        having = support.versions_with(lambda other: _has_flag(other, flag))
        if having:
            fix = "remove it"
            names = _names_in(support, flag)
            if names:
                fix = f"use {names[0]} (its name in SGLang {support.version})"
            plan.problem(
                where,
                variable,
                value,
                f"SGLang {support.version} has no flag {flag} ({_since(having)} has it)",
                f"{fix} or pin sglang_version {having[0]}",
            )
            return False
        close = difflib.get_close_matches(flag, list(support.flags), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "see `python -m sglang.launch_server --help`"
        plan.problem(where, variable, value, f"SGLang {support.version} has no flag {flag}", hint)
        return False
    if not known.takes_value and not isinstance(value, bool):
        plan.problem(where, variable, value, f"{flag} is a switch", "set it to true or false")
        return False
    if known.takes_value and isinstance(value, bool):
        plan.problem(where, variable, value, f"{flag} takes a value, not true/false", "give its value")
        return False
    if known.takes_value and isinstance(value, list) and not known.many:
        plan.problem(where, variable, value, f"{flag} takes one value", "give a single value")
        return False
    expected = {"int": (int,), "float": (int, float)}.get(known.type or "")
    items = value if isinstance(value, list) else [value]
    if expected and any(isinstance(item, bool) or not isinstance(item, expected) for item in items):
        plan.problem(where, variable, value, f"{flag} takes a number ({known.type})", "give a number without quotes")
        return False
    if known.choices and value is not None and value not in known.choices:
        choices = ", ".join(str(choice) for choice in known.choices)
        plan.problem(where, variable, value, f"{flag} accepts {choices}", "pick one of them")
        return False
    return True


def _has_flag(support: Support, flag: str) -> bool:
    """True when `flag` is a regular flag of `support`'s version (not only a deprecated alias)."""
    known = support.flags.get(flag)
    return known is not None and not known.deprecated


def _names_in(support: Support, flag: str) -> list[str]:
    """What `support`'s version calls a setting another version spells `flag` (same field, or renamed)."""
    names: set[str] = set()
    for other in support.others:
        known = other.flags.get(flag)
        if known is None:
            continue
        names.update(
            option
            for option, mine in support.flags.items()
            if known.dest and mine.dest == known.dest and not mine.deprecated and mine.takes_value == known.takes_value
        )
        names.update(old for old, new in other.renamed_flags.items() if new.split("=", 1)[0] == flag and old in support.flags)
    return sorted(names)


def _positive_int(plan: Plan, variable: str, value: Any, minimum: int = 1) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        plan.problem("host", variable, value, f"must be an integer >= {minimum}", f"set {variable} to a whole number")
        return None
    return value


def _speculative_flags(
    plan: Plan, support: Support, where: str, variable: str, speculative: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Checks speculative settings the way SGLang 0.5.23 resolves them; returns the flags, or None."""
    if not speculative:
        return {}
    algorithm = speculative.get("algorithm")
    if algorithm not in support.speculative_algorithms:
        options = ", ".join(sorted(support.speculative_algorithms))
        having = support.versions_with(lambda other: algorithm in other.speculative_algorithms)
        plan.problem(
            where,
            f"{variable}.algorithm",
            algorithm,
            f"SGLang {support.version} knows {options}" + (f" ({_since(having)} knows {algorithm})" if having else ""),
            "pick one" + (f" or pin sglang_version {having[0]}" if having else ""),
        )
        return None
    flags: dict[str, Any] = {}
    valid = True
    for key, value in speculative.items():
        flag = "--speculative-" + key.replace("_", "-")
        if not _check_flag(plan, support, where, f"{variable}.{key}", flag, value):
            valid = False
        flags[flag] = value
    if not valid or algorithm not in EAGLE_FAMILY:
        return flags if valid else None
    steps = speculative.get("num_steps")
    topk = speculative.get("eagle_topk")
    draft = speculative.get("num_draft_tokens")
    if steps is None and (topk is not None or draft is not None):
        plan.problem(
            where,
            f"{variable}.num_steps",
            None,
            f"SGLang {support.version} stops at start when eagle_topk or num_draft_tokens is set without num_steps",
            "set num_steps, eagle_topk and num_draft_tokens together (or none of them for SGLang's choice)",
        )
        return None
    for key, value in (("num_steps", steps), ("eagle_topk", topk), ("num_draft_tokens", draft)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            plan.problem(where, f"{variable}.{key}", value, "must be an integer >= 1", f"set {key} to a whole number")
            return None
    if steps is not None and topk == 1 and draft is not None and draft != steps + 1:
        plan.problem(
            where,
            f"{variable}.num_draft_tokens",
            draft,
            f"with eagle_topk 1 SGLang verifies num_steps + 1 = {steps + 1} tokens and ignores this value",
            f"set num_draft_tokens: {steps + 1}",
        )
        return None
    if steps is not None and topk is None:
        plan.problem(
            where, f"{variable}.eagle_topk", None, "num_steps is set without eagle_topk", "set eagle_topk (1 for a chain)"
        )
        return None
    return flags


def _checked_args(
    plan: Plan, support: Support, where: str, variable: str, server_args: Mapping[str, Any]
) -> dict[str, Any] | None:
    flags: dict[str, Any] = {}
    valid = True
    managed = _managed_dests(support)
    for key, value in server_args.items():
        flag = _flag_name(str(key))
        known = support.flags.get(flag)
        dest = known.dest if known else ""
        if dest and (dest in SECRET_DESTS or SECRET_DEST.search(dest)):
            plan.problem(
                where,
                f"{variable}.{key}",
                "<hidden>",
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
            plan.problem(where, f"{variable}.{key}", value, f"{flag}{alias} is set by sglang-fleet", fix)
            valid = False
        elif flag.startswith("--speculative-"):
            plan.problem(
                where, f"{variable}.{key}", value, "speculative settings have their own variable", "use sglang_speculative"
            )
            valid = False
        elif _check_flag(plan, support, where, f"{variable}.{key}", flag, value):
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


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def _control_character(value: Any) -> str | None:
    """The first control character in a value (its strings, a mapping's keys and values, a list's items), if any."""
    if isinstance(value, str):
        found = CONTROL.search(value)
        return f"U+{ord(found.group()):04X}" if found else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            found_key = _control_character(key) if isinstance(key, str) else None
            if found_key or (found_key := _control_character(item)):
                return found_key
    elif isinstance(value, (list, tuple)):
        for item in value:
            if found_item := _control_character(item):
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
)


def _control_problems(plan: Plan, settings: Mapping[str, Any]) -> bool:
    """One problem per variable (per key of a mapping) holding a control character; True when there was one."""
    found = False
    for setting, variable in TEXT_SETTINGS:
        value = settings.get(setting)
        entries = value.items() if isinstance(value, Mapping) else [(None, value)]
        for key, item in entries:
            character = _control_character(key) if isinstance(key, str) else None
            character = character or _control_character(item)
            if character:
                found = True
                shown_key = str(key).encode("unicode_escape").decode("ascii")  # the line stays one line
                plan.problem(
                    "host",
                    variable if key is None else f"{variable}.{shown_key}",
                    item,
                    f"contains the control character {character}, which would inject a line into (or break) the "
                    "rendered unit or environment file",
                    "remove the control character (newline, tab, escape ...)",
                )
    return found


ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables that change how programs load code: a service's environment must not steer its root helpers.
LOADER_PREFIXES = ("LD_", "PYTHON")


def _check_environment(plan: Plan, support: Support, where: str, variable: str, environment: Mapping[str, Any]) -> None:
    for name, value in environment.items():
        if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
            plan.problem(where, f"{variable}.{name}", value, "not a valid environment variable name", "use letters, digits and _")
        elif name.startswith(LOADER_PREFIXES):
            plan.problem(
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
            plan.problem(
                where,
                f"{variable}.{name}",
                value,
                f"SGLang {support.version} no longer reads it and ignores it silently"
                + (f" ({_since(still)} reads it)" if still else ""),
                fix,
            )
        elif name.startswith(("SGLANG_", "SGL_")) and not support.knows_environment(name):
            having = support.versions_reading(name)
            if having:
                plan.problem(
                    where,
                    f"{variable}.{name}",
                    value,
                    f"SGLang {support.version} does not read {name} and would ignore it silently ({_since(having)} reads it)",
                    f"remove {name} or pin sglang_version {having[0]}",
                )
        elif name == "CUDA_VISIBLE_DEVICES":
            plan.problem(
                where, f"{variable}.{name}", value, "GPUs are given to each instance by sglang-fleet", "use sglang_gpu_ids"
            )


def _override_problems(plan: Plan, overrides: Mapping[Any, Any], count: int) -> None:
    """An override must name an instance of this host (0 .. count - 1)."""
    for key in overrides or {}:
        index = key if isinstance(key, int) and not isinstance(key, bool) else None
        if isinstance(key, str) and key.isdigit():
            index = int(key)
        if index is None or not 0 <= index < count:
            plan.problem(
                "host",
                f"sglang_instance_overrides.{key}",
                overrides[key],
                f"names no instance: this host has {count} instance(s), numbered 0 to {count - 1}",
                "use the instance's number (its port minus sglang_port_base) or remove the override",
            )


def _instance_override(overrides: Mapping[Any, Any], index: int) -> Mapping[str, Any]:
    for key in (index, str(index)):
        if key in overrides:
            return overrides[key] or {}
    return {}


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = dict(base)
    merged.update(extra or {})
    return merged


def _derive_instances(
    plan: Plan, settings: Mapping[str, Any], gpu_ids: list[int], gpu_facts: Sequence[Mapping[str, Any]], support: Support
) -> list[dict[str, Any]]:
    tensor = _positive_int(plan, "sglang_tensor_parallel_size", settings["tensor_parallel_size"])
    data = _positive_int(plan, "sglang_data_parallel_size", settings["data_parallel_size"])
    pipeline = _positive_int(plan, "sglang_pipeline_parallel_size", settings["pipeline_parallel_size"])
    port_base = _positive_int(plan, "sglang_port_base", settings["port_base"], 1024)
    nccl_base = _positive_int(plan, "sglang_nccl_port_base", settings["nccl_port_base"], 1024)
    if None in (tensor, data, pipeline, port_base, nccl_base):
        return []
    assert tensor and data and pipeline and port_base and nccl_base
    ranks = tensor * data * pipeline
    per_instance = settings["gpus_per_instance"] or ranks
    if per_instance != ranks:
        plan.problem(
            "host",
            "sglang_gpus_per_instance",
            per_instance,
            f"tensor x data x pipeline parallel = {tensor} x {data} x {pipeline} = {ranks} GPUs per instance",
            f"set sglang_gpus_per_instance: {ranks} or change the parallel sizes",
        )
        return []
    fitting = len(gpu_ids) // per_instance
    count = settings["instance_count"] or fitting
    if count < 1 or count > fitting:
        plan.problem(
            "host",
            "sglang_instance_count" if settings["instance_count"] else "sglang_gpus_per_instance",
            settings["instance_count"] or per_instance,
            f"{len(gpu_ids)} GPU(s) {gpu_ids} hold {fitting} instance(s) of {per_instance} GPU(s)",
            "use fewer or smaller instances, or list more GPUs in sglang_gpu_ids",
        )
        return []
    base_args = _checked_args(plan, support, "host", "sglang_server_args", settings["server_args"])
    _check_environment(plan, support, "host", "sglang_environment", settings["environment"])
    model_path = str(settings["model_path"])
    served_name = settings["served_model_name"] or model_path.rstrip("/").rsplit("/", 1)[-1]
    listen_host = str(settings["listen_host"])
    if not is_loopback(listen_host) and not _truthy(settings.get("has_api_key")):
        plan.problem(
            "host",
            "sglang_listen_host",
            listen_host,
            "servers reachable beyond this host need an API key",
            "set sglang_api_key (from ansible-vault) or keep 127.0.0.1 and put the router in front",
        )
    has_key = _truthy(settings.get("has_api_key"))
    secrets_dir_set = bool(settings.get("secrets_dir"))
    _override_problems(plan, settings["instance_overrides"], count)
    uuids = {gpu["index"]: str(gpu["uuid"]) for gpu in gpu_facts if gpu.get("uuid")}
    instances = []
    for index in range(count):
        override = _instance_override(settings["instance_overrides"], index)
        port = port_base + index
        name = f"sglang-{port}"
        where = f"instance {name}"
        unknown = sorted(set(override) - {"server_args", "speculative", "environment"})
        if unknown:
            plan.problem(
                where,
                f"sglang_instance_overrides.{index}",
                unknown,
                "unknown keys",
                "use server_args, speculative or environment",
            )
        speculative = _merge(settings["speculative"], override.get("speculative"))
        spec_flags = _speculative_flags(plan, support, where, "sglang_speculative", speculative)
        own_args = _checked_args(
            plan, support, where, f"sglang_instance_overrides.{index}.server_args", override.get("server_args") or {}
        )
        _check_environment(
            plan, support, where, f"sglang_instance_overrides.{index}.environment", override.get("environment") or {}
        )
        gpus = gpu_ids[index * per_instance : (index + 1) * per_instance]
        argv = [
            "--model-path", model_path,
            "--served-model-name", served_name,
            "--host", listen_host,
            "--port", str(port),
            "--nccl-port", str(nccl_base + index),
            "--tp-size", str(tensor),
        ]  # fmt: skip
        if data > 1:
            argv += ["--dp-size", str(data)]
        if pipeline > 1:
            argv += ["--pp-size", str(pipeline)]
        if settings["enable_metrics"]:
            argv.append("--enable-metrics")
        for flag, value in {**(spec_flags or {}), **(base_args or {}), **(own_args or {})}.items():
            argv += render_flag(flag, value)
        # The API key reaches SGLang through a root-only YAML file the unit names last: this argv is exactly what
        # the unit runs and what preflight's parser check parses.
        config_file = f"{str(settings['secrets_dir']).rstrip('/')}/{name}.yaml" if secrets_dir_set and has_key else None
        if config_file:
            argv += ["--config", config_file]
        environment = {str(k): str(v) for k, v in _merge(settings["environment"], override.get("environment")).items()}
        # GPUs by UUID: inside the unit's device cgroup CUDA numbers only the GPUs it may open, from 0, so a
        # host-wide index would name no GPU (or the wrong one); a UUID names the same GPU everywhere.
        environment["CUDA_VISIBLE_DEVICES"] = ",".join(uuids.get(gpu, str(gpu)) for gpu in gpus)
        environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        algorithm = speculative.get("algorithm")
        instances.append(
            {
                "name": name,
                "unit": f"{name}.service",
                "index": index,
                "port": port,
                "nccl_port": nccl_base + index,
                "gpu_ids": gpus,
                "gpu_uuids": [uuids[gpu] for gpu in gpus if gpu in uuids],
                "url": f"http://{connect_host(listen_host)}:{port}",
                "model_path": model_path,
                "served_model_name": served_name,
                "tensor_parallel_size": tensor,
                "pipeline_parallel_size": pipeline,
                "ranks": ranks,
                "argv": argv,
                "config_file": config_file,
                "environment": environment,
                "settings": _merge(settings["server_args"], override.get("server_args")),
                "speculative": {
                    **{key: value for key, value in speculative.items() if key != "algorithm"},
                    "algorithm": algorithm,
                    # SGLang reports NEXTN, its alias, as EAGLE in /server_info.
                    "reported_algorithm": "EAGLE" if algorithm == "NEXTN" else algorithm,
                },
            }
        )
    return instances


def _model_problems(
    plan: Plan, settings: Mapping[str, Any], model: Mapping[str, Any], instances: list[dict[str, Any]], support: Support
) -> int:
    """Checks the model directory; returns the weight bytes (0 when unknown)."""
    path = settings["model_path"]
    if not model.get("exists"):
        plan.problem("host", "sglang_model_path", path, "no such directory on the host", "copy the model there or fix the path")
        return 0
    if not model.get("config"):
        plan.problem(
            "host", "sglang_model_path", path, "no readable config.json in the model directory", "copy the complete model"
        )
        return 0
    architectures = model.get("architectures") or []
    unknown = [arch for arch in architectures if arch not in support.architectures]
    if not architectures or unknown:
        having = support.versions_with(lambda other: bool(unknown) and set(unknown) <= other.architectures)
        plan.problem(
            "host",
            "sglang_model_path",
            path,
            f"architecture {unknown or architectures} is not supported by SGLang {support.version}"
            + (f" ({_since(having)} supports it)" if having else ""),
            f"pin sglang_version {having[0]} or serve another model"
            if having
            else "pin an SGLang version that supports it (see the support table) or serve another model",
        )
    for shard in model.get("missing_shards", []):
        plan.problem(
            "host", "sglang_model_path", path, f"shard {shard} listed in the index is missing", "copy the complete model"
        )
    for shard in model.get("empty_shards", []):
        plan.problem("host", "sglang_model_path", path, f"shard {shard} is empty", "copy the complete model")
    total = int(model.get("total_size") or 0)
    on_disk = int(model.get("shard_bytes") or 0)
    if total and on_disk and on_disk < total:
        plan.problem(
            "host",
            "sglang_model_path",
            path,
            f"shards hold {on_disk / GIB:.1f} GiB but the index declares {total / GIB:.1f} GiB of tensors",
            "copy the complete model (a download was cut short)",
        )
    for name, problem in sorted((model.get("checksum_problems") or {}).items()):
        plan.problem("host", "sglang_model_sha256", name, problem, "copy the file again")
    for instance in instances:
        algorithm = instance["speculative"]["algorithm"]
        draft_path = instance["speculative"].get("draft_model_path")
        if algorithm in ("NEXTN", "EAGLE") and not draft_path and not (model.get("has_mtp_tensors") and model.get("mtp_layers")):
            plan.problem(
                f"instance {instance['name']}",
                "sglang_speculative.algorithm",
                algorithm,
                f"{algorithm} without a draft model needs MTP weights in the checkpoint "
                f"(mtp.* tensors: {bool(model.get('has_mtp_tensors'))}, "
                f"MTP layers in config.json: {model.get('mtp_layers') or 0})",
                "serve a checkpoint with MTP layers or set sglang_speculative.draft_model_path",
            )
        if algorithm == "EAGLE3" and not draft_path:
            plan.problem(
                f"instance {instance['name']}",
                "sglang_speculative.draft_model_path",
                None,
                "EAGLE3 needs a draft model",
                "set draft_model_path",
            )
    return total or on_disk


# Problem lines for unreadable model files: the first ones, then a count.
UNREADABLE_SHOWN = 5


def _model_access_problems(plan: Plan, settings: Mapping[str, Any], model: Mapping[str, Any]) -> None:
    """The model as the servers' account sees it: not hidden by the unit's sandbox, every file it opens readable."""
    path = settings["model_path"]
    if model.get("hidden_by"):
        plan.problem(
            "host",
            "sglang_model_path",
            path,
            f"the servers cannot see it: their unit's {model['hidden_by']} (root can read it, the service cannot)",
            "move the model out of /home, /root, /run/user and /tmp, e.g. to /srv/models, and set sglang_model_path",
        )
        return
    unreadable = [str(line) for line in model.get("unreadable") or []]
    who = model.get("read_as") or "the service account"
    for line in unreadable[:UNREADABLE_SHOWN]:
        plan.problem(
            "host",
            "sglang_model_path",
            path,
            f"{line}: the servers' account {who} cannot read it",
            "make it readable, e.g. chmod -R o+rX (or chgrp -R the servers' group and chmod -R g+rX) the model directory",
        )
    if len(unreadable) > UNREADABLE_SHOWN:
        plan.problem(
            "host",
            "sglang_model_path",
            path,
            f"{len(unreadable) - UNREADABLE_SHOWN} more files or directories the servers' account {who} cannot read",
            "make the whole model directory readable to it",
        )


def _memory_fraction(instance: dict[str, Any], gpu_mib: int, auto_reserve_mib: int) -> tuple[float, str]:
    value = instance["settings"].get("mem-fraction-static")
    if value is not None:
        return float(value), "mem-fraction-static"
    return round((gpu_mib - auto_reserve_mib) / gpu_mib, 3), "SGLang's automatic mem-fraction-static (estimated)"


def _memory_problems(
    plan: Plan, settings: Mapping[str, Any], facts: Mapping[str, Any], instances: list[dict[str, Any]], weight_bytes: int
) -> None:
    gpus = {gpu["index"]: gpu for gpu in facts.get("gpus") or []}
    margin = float(settings["memory_margin_gib"]) * GIB
    host_cache_bytes = 0.0
    for instance in instances:
        where = f"instance {instance['name']}"
        memories = [gpus[gpu]["memory_total_mib"] for gpu in instance["gpu_ids"] if gpu in gpus]
        if not memories:
            continue
        gpu_mib = min(memories)
        fraction, source = _memory_fraction(instance, gpu_mib, int(settings["auto_reserve_mib"]))
        if not 0 < fraction < 1:
            if source != "mem-fraction-static":  # a value given is reported by _value_problems
                plan.problem(
                    where, "sglang_server_args.mem-fraction-static", fraction, "must be between 0 and 1", "use e.g. 0.85"
                )
            continue
        # Tensor parallel splits every layer, pipeline parallel splits the layers: each GPU holds a share.
        weight_share = weight_bytes / instance["tensor_parallel_size"] / instance["pipeline_parallel_size"]
        available = gpu_mib * MIB * fraction
        needed = weight_share + margin
        if weight_bytes and needed > available:
            fits_fraction = math.ceil(needed / (gpu_mib * MIB) * 100) / 100
            tp_needed = math.ceil(weight_bytes / (available - margin)) if available > margin else None
            fixes = [f"mem-fraction-static >= {fits_fraction:.2f}" if fits_fraction < 0.98 else None]
            if tp_needed:
                fixes.append(f"tensor parallel >= {tp_needed}")
            plan.problem(
                where,
                "sglang_server_args.mem-fraction-static",
                fraction,
                f"weights {weight_bytes / GIB:.1f} GiB / tp {instance['tensor_parallel_size']} = {weight_share / GIB:.1f} GiB "
                f"+ {margin / GIB:.0f} GiB margin need {needed / GIB:.1f} GiB per GPU, but {gpu_mib / 1024:.1f} GiB x {fraction} "
                f"({source}) = {available / GIB:.1f} GiB: short by {(needed - available) / GIB:.1f} GiB",
                " or ".join(fix for fix in fixes if fix) or "use GPUs with more memory",
            )
        if instance["settings"].get("enable-hierarchical-cache"):
            size_gb = instance["settings"].get("hicache-size") or 0
            if size_gb:
                per_rank = float(size_gb) * 1e9
            else:
                ratio = float(instance["settings"].get("hicache-ratio") or 2.0)
                per_rank = ratio * max(0.0, available - weight_share)
            host_cache_bytes += per_rank * instance["ranks"]
    ram_mb = int(settings["host_memory_mb"] or facts.get("memtotal_mb") or 0)
    reserve = float(settings["host_ram_reserve_gib"]) * GIB
    usable = ram_mb * MIB - reserve
    if host_cache_bytes and host_cache_bytes > usable:
        host_size = settings["server_args"].get("hicache-size")
        # Name the instances whose own size differs from the host's, when overrides are what tip the sum.
        overridden = {
            instance["name"]: instance["settings"].get("hicache-size")
            for instance in instances
            if instance["settings"].get("enable-hierarchical-cache") and instance["settings"].get("hicache-size") != host_size
        }
        plan.problem(
            "host",
            "sglang_instance_overrides[].server_args.hicache-size" if overridden else "sglang_server_args.hicache-size",
            overridden or host_size,
            f"host cache {host_cache_bytes / 1e9:.0f} GB over all ranks exceeds host RAM {ram_mb / 1024:.0f} GiB "
            f"minus {settings['host_ram_reserve_gib']} GiB reserve = {usable / GIB:.0f} GiB",
            f"hicache-size <= {max(0, int(usable / 1e9 / max(1, sum(i['ranks'] for i in instances))))} GB per rank",
        )


def _gpu_and_port_problems(
    plan: Plan, settings: Mapping[str, Any], facts: Mapping[str, Any], instances: list[dict[str, Any]]
) -> None:
    known = {gpu["index"] for gpu in facts.get("gpus") or []}
    # The fleet's own instances, planned or not: the deploy stops those it no longer plans, and those a reshape
    # displaces (sglang_reshape), before anything starts on their GPUs and ports.
    own_units = {instance["name"] + ".service" for instance in instances} | set(_fleet_gpus(facts))
    for instance in instances:
        where = f"instance {instance['name']}"
        for gpu in instance["gpu_ids"]:
            if gpu not in known:
                plan.problem(
                    where,
                    "sglang_gpu_ids",
                    gpu,
                    f"GPU {gpu} does not exist (nvidia-smi lists {sorted(known)})",
                    "list existing GPU indexes",
                )
        for process in facts.get("gpu_processes") or []:
            if process.get("gpu_index") in instance["gpu_ids"] and process.get("unit") not in own_units:
                plan.problem(
                    where,
                    "sglang_gpu_ids",
                    instance["gpu_ids"],
                    f"GPU {process['gpu_index']} holds {process.get('used_mib', '?')} MiB of PID {process['pid']} "
                    f"({process.get('name', '?')}, unit {process.get('unit') or 'none'})",
                    "stop that process (an orphaned scheduler?) or use other GPUs",
                )
    seen: dict[int, str] = {}
    listeners = {entry["port"]: entry for entry in facts.get("listening") or []}
    for instance in instances:
        for variable, port in (("sglang_port_base", instance["port"]), ("sglang_nccl_port_base", instance["nccl_port"])):
            where = f"instance {instance['name']}"
            if port > 65535:
                plan.problem(where, variable, port, "port beyond 65535", "use a lower base")
            if port in seen:
                plan.problem(
                    where, variable, port, f"port {port} is also {seen[port]}", "choose bases whose ranges do not overlap"
                )
            seen[port] = f"{instance['name']}'s {variable}"
            taken = listeners.get(port)
            if taken and taken.get("unit") not in own_units:
                plan.problem(
                    where,
                    variable,
                    port,
                    f"port {port} is taken by PID {taken['pid']} ({taken.get('name', '?')})"
                    if taken.get("pid")
                    else f"port {port} is taken by a process that cannot be named here",
                    "stop that program or choose another base",
                )
    ids = list(settings["gpu_ids"] or [])
    duplicates = sorted({gpu for gpu in ids if ids.count(gpu) > 1})
    if duplicates:
        plan.problem(
            "host", "sglang_gpu_ids", ids, f"GPU(s) {duplicates} listed twice would serve two instances", "list each GPU once"
        )


FLEET_UNIT = re.compile(r"sglang-\d+\.service")


def _fleet_gpus(facts: Mapping[str, Any]) -> dict[str, list[int]]:
    """The GPUs each of the fleet's running instance units holds now (its processes' memory, as nvidia-smi lists it)."""
    held: dict[str, set[int]] = {}
    for process in facts.get("gpu_processes") or []:
        unit = str(process.get("unit") or "")
        if FLEET_UNIT.fullmatch(unit) and isinstance(process.get("gpu_index"), int):
            held.setdefault(unit, set()).add(process["gpu_index"])
    return {unit: sorted(gpus) for unit, gpus in sorted(held.items())}


def sglang_reshape(instances: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of the host's shape stops first, and what keeps serving meanwhile.

    A running instance that holds a GPU the new plan gives to another instance is displaced: it stops (drained
    from the router first) before any instance restarts, and starts again in its new shape with the stopped
    instances. Running instances the plan no longer has stop anyway. `summary` states the capacity that remains.
    """
    held = _fleet_gpus(facts)
    owner = {gpu: str(instance["unit"]) for instance in instances for gpu in instance["gpu_ids"]}
    planned = {str(instance["unit"]) for instance in instances}
    displaced = [unit for unit, gpus in held.items() if unit in planned and any(owner.get(gpu, unit) != unit for gpu in gpus)]
    removed = [unit for unit in held if unit not in planned]
    if not displaced:
        return {"displaced": [], "removed": removed, "summary": ""}
    serving = [unit for unit in held if unit in planned and unit not in displaced]
    takers = {unit: sorted({owner[gpu] for gpu in held[unit] if owner.get(gpu, unit) != unit}) for unit in displaced}
    summary = (
        f"reshape from {len(held)} running instance(s) to {len(instances)}: "
        + "; ".join(f"{unit} stops first (GPU(s) {held[unit]} go to {', '.join(takers[unit])})" for unit in displaced)
        + (f"; {', '.join(removed)} stop(s) as no longer planned" if removed else "")
        + f". Serving while they are down: {len(serving)} of {len(held)}"
        + (f" ({', '.join(serving)}, each until its own restart)" if serving else "")
        + "; the displaced start again in their new shape with the instances not yet running."
    )
    return {"displaced": displaced, "removed": removed, "summary": summary}


def gpu_device(gpu: Mapping[str, Any]) -> str | None:
    """The device node of a GPU (/dev/nvidia<minor>), as the host facts found it."""
    if gpu.get("device"):
        return str(gpu["device"])
    minor = gpu.get("minor_number")
    return f"/dev/nvidia{minor}" if isinstance(minor, int) else None


def sglang_plan(
    settings: Mapping[str, Any], facts: Mapping[str, Any], tables: Sequence[Mapping[str, Any]] | Mapping[str, Any]
) -> dict[str, Any]:
    """Derives a host's instances from its settings and facts and lists every problem found.

    `tables`: the support tables of every supported version (one table alone is taken as the pinned one).
    """
    plan = Plan(host=str(settings["host"]))
    pinned = _pinned_support(plan, str(settings.get("version") or ""), tables)
    if pinned is None:
        return {"instances": [], "problems": plan.problems}
    support = pinned
    constraints = settings.get("constraints_versions")
    if constraints is not None and support.version not in constraints:
        plan.problem(
            "host",
            "sglang_version",
            support.version,
            f"roles/sglang_venv/files/constraints-{support.version}.txt is missing (the exact packages of SGLang "
            f"{support.version} the wheelhouse installs)",
            "resolve it as that file's header for another version says, or pin "
            + " / ".join(sorted(constraints, key=_version_key, reverse=True)),
        )
    detected = [gpu["index"] for gpu in facts.get("gpus") or []]
    if facts.get("gpu_error"):
        lines = str(facts["gpu_error"]).strip().splitlines() or ["?"]
        plan.problem(
            "host",
            "sglang_plan_nvidia_smi",
            settings.get("nvidia_smi", "nvidia-smi"),
            f"GPUs could not be listed: {lines[-1]}",
            "install the NVIDIA driver (nvidia-smi must list the GPUs)",
        )
        return {"instances": [], "problems": plan.problems}
    _unknown_variable_problems(plan, settings.get("variable_names"))
    if _control_problems(plan, settings) or _control_character(settings.get("server_text")):
        # Such a value must not reach a template, not even preflight's check-mode rendering (the server role's
        # preflight names its own variables).
        return {"instances": [], "problems": plan.problems}
    gpu_ids = [int(gpu) for gpu in settings["gpu_ids"]] if settings["gpu_ids"] else detected
    instances = _derive_instances(plan, settings, gpu_ids, facts.get("gpus") or [], support)
    _value_problems(plan, support, instances, facts.get("model") or {})
    devices = {gpu["index"]: gpu_device(gpu) for gpu in facts.get("gpus") or []}
    for instance in instances:
        # The device nodes the instance may open (its unit allows only these and the driver's shared ones).
        instance["gpu_devices"] = [devices[gpu] for gpu in instance["gpu_ids"] if devices.get(gpu)]
    weight_bytes = _model_problems(plan, settings, facts.get("model") or {}, instances, support)
    _model_access_problems(plan, settings, facts.get("model") or {})
    _memory_problems(plan, settings, facts, instances, weight_bytes)
    _gpu_and_port_problems(plan, settings, facts, instances)
    return {"instances": instances, "problems": plan.problems, "reshape": sglang_reshape(instances, facts)}


def _by_dest(support: Support, instance: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """An instance's server args as {argparse dest: (variable, value)}."""
    found: dict[str, tuple[str, Any]] = {}
    for key, value in instance.get("settings", {}).items():
        known = support.flags.get(_flag_name(str(key)))
        if known and known.dest:
            found[known.dest] = (f"sglang_server_args.{key}", value)
    return found


def _value_problems(plan: Plan, support: Support, instances: list[dict[str, Any]], model: Mapping[str, Any]) -> None:
    """What SGLang refuses at start (or a careful operator never wants), beyond what its parser refuses."""
    for instance in instances:
        where = f"instance {instance['name']}"
        values = _by_dest(support, instance)
        for dest, (minimum, maximum, exclusive, text) in VALUE_BOUNDS.items():
            if dest not in values:
                continue
            variable, value = values[dest]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # a wrong type is reported by the flag check
            low = value <= minimum if exclusive else value < minimum
            if low or (maximum is not None and value >= maximum):
                plan.problem(
                    where, variable, value, text, "e.g. 0.85" if dest == "mem_fraction_static" else "give a sensible value"
                )
        tensor = int(instance["tensor_parallel_size"])
        attn_tp, over = tensor, f"{tensor} GPUs"
        if values.get("enable_dp_attention", ("", False))[1] is True:
            # DP attention splits the attention heads over tp / dp GPUs only.
            data = max(1, int(instance["ranks"]) // (tensor * int(instance["pipeline_parallel_size"])))
            attn_tp, over = max(1, tensor // data), f"{max(1, tensor // data)} GPUs (tp / dp with DP attention)"
        heads = model.get("num_attention_heads")
        kv_heads = model.get("num_key_value_heads")
        if isinstance(heads, int) and heads > 0 and heads % attn_tp:
            plan.problem(
                where,
                "sglang_tensor_parallel_size",
                tensor,
                f"the model's {heads} attention heads cannot be split over {over} (SGLang asserts "
                "num_attention_heads % tp_size == 0 at start)",
                f"use a tensor parallel size that divides {heads}",
            )
        elif isinstance(kv_heads, int) and kv_heads > 0 and (kv_heads % attn_tp if kv_heads >= attn_tp else attn_tp % kv_heads):
            plan.problem(
                where,
                "sglang_tensor_parallel_size",
                tensor,
                f"the model's {kv_heads} KV heads can be neither split over nor replicated across {over} "
                "(SGLang asserts one divides the other)",
                f"use a tensor parallel size that divides {kv_heads} or is a multiple of it",
            )
        if "context_length" in values:
            variable, value = values["context_length"]
            limit = model.get("context_length")
            allowed = _truthy(instance.get("environment", {}).get(ALLOW_LONGER_CONTEXT, ""))
            if (
                isinstance(limit, int)
                and isinstance(value, int)
                and not isinstance(value, bool)
                and value > limit
                and not allowed
            ):
                plan.problem(
                    where,
                    variable,
                    value,
                    f"above the model's context length {limit} (config.json); SGLang refuses to start unless "
                    f"{ALLOW_LONGER_CONTEXT}=1, and outputs beyond it may be wrong",
                    f'context-length <= {limit}, or set sglang_environment.{ALLOW_LONGER_CONTEXT}: "1" deliberately',
                )


@functools.lru_cache(maxsize=1)
def declared_variables(root: str = "") -> frozenset[str]:
    """Every sglang_*/cuda_* variable a role declares (meta/argument_specs.yml) or sets itself (its vars, defaults,
    set_fact and register names in roles/, playbooks/ and molecule/, and the facts its modules return). Read once
    per run, from the checkout the plugin lives in."""
    import yaml  # Ansible's controller always has PyYAML

    base = Path(root) if root else Path(__file__).resolve().parents[2]
    names: set[str] = set()
    for spec in base.glob("roles/*/meta/argument_specs.yml"):
        data = yaml.safe_load(spec.read_text()) or {}
        for entry in (data.get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    assigned = re.compile(r"^[ \t-]*(?:register:\s*)?((?:sglang|cuda)_\w+)\s*:?", re.MULTILINE)
    for path in [
        *base.glob("roles/**/*.yml"),
        *base.glob("playbooks/**/*.yml"),
        *base.glob("molecule/**/*.yml"),
        *base.glob("*.yml"),
    ]:
        names.update(match.group(1) for match in assigned.finditer(path.read_text(errors="replace")))
    # Facts the roles' own modules return (ansible_facts={"sglang_host": ...}).
    quoted = re.compile(r"[\"']((?:sglang|cuda)_\w+)[\"']")
    for path in base.glob("plugins/modules/*.py"):
        names.update(match.group(1) for match in quoted.finditer(path.read_text(errors="replace")))
    return frozenset(names)


def _unknown_variable_problems(plan: Plan, names: Any) -> None:
    """A sglang_*/cuda_* variable the host has that no role reads: a typo silently changes nothing."""
    if not names or isinstance(names, str):
        return
    known = declared_variables()
    for name in sorted({str(name) for name in names if re.match(r"(sglang|cuda)_", str(name))} - known):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        plan.problems.append(
            f"{plan.host} host: {name}: no role of sglang-fleet reads this variable, so it changes nothing"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; fix: {'rename it to ' + close[0] if close else 'correct its name or remove it'}"
        )


def sglang_checked_command_lines(instances: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What preflight's parser check reads: each instance's exact argv, and the config file it may stand in for."""
    return {
        str(instance["name"]): {"argv": list(instance["argv"]), "stand_in_config": instance.get("config_file")}
        for instance in instances
    }


def _variable_of(instance: Mapping[str, Any], flag: str) -> tuple[str, Any]:
    """The variable and value behind a rendered flag of an instance."""
    for key, value in instance.get("settings", {}).items():
        if _flag_name(str(key)) == flag:
            return f"sglang_server_args.{key}", value
    for key, value in instance.get("speculative", {}).items():
        if "--speculative-" + key.replace("_", "-") == flag:
            return f"sglang_speculative.{key}", value
    return "command line", flag


def sglang_parse_problems(instances: Sequence[Mapping[str, Any]], checked: Mapping[str, Any], host: str) -> list[str]:
    """One problem line per instance whose command line the runtime's own parser refused.

    `checked` is the registered result of files/check_server_args.py ({name: {rc, error}} on stdout).
    Every refused command line counts: argparse's refusal (rc 2) and a settings check that raised (rc 1),
    as SGLang would at start. A checker that could not run at all means a venv the deploy is about to
    repair, which is no reason to refuse the deploy.
    """
    if checked.get("rc") != 0 or not checked.get("stdout"):
        return []
    verdicts = json.loads(checked["stdout"])
    plan = Plan(host=host)
    for instance in instances:
        verdict = verdicts.get(instance["name"], {})
        if verdict.get("rc", 0) == 0:
            continue
        lines = [line.strip() for line in str(verdict.get("error", "")).splitlines() if line.strip()]
        message = " ".join(line for line in lines if "error:" in line) or (lines[-1] if lines else f"exit {verdict['rc']}")
        flags = re.findall(r"--[A-Za-z0-9][\w-]*", message)
        variable, value = _variable_of(instance, flags[0]) if flags else ("command line", None)
        plan.problem(
            f"instance {instance['name']}",
            variable,
            value,
            f"SGLang's parser refused it: {message}",
            "correct or remove that setting",
        )
    return plan.problems


def sglang_gate_problems(hosts: Sequence[str], hostvars: Mapping[str, Any], facts: Sequence[str]) -> list[str]:
    """Every problem every host's preflight left in the named facts, host by host."""
    return [problem for host in hosts for fact in facts for problem in (hostvars[host].get(fact) or [])]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_plan": sglang_plan,
            "sglang_render_flag": render_flag,
            "sglang_parse_problems": sglang_parse_problems,
            "sglang_gate_problems": sglang_gate_problems,
            "sglang_checked_command_lines": sglang_checked_command_lines,
            "sglang_reshape": sglang_reshape,
            "sglang_problem": problem_line,
            "sglang_connect_host": connect_host,
        }


__all__: Sequence[str] = (
    "FilterModule",
    "declared_variables",
    "render_flag",
    "sglang_checked_command_lines",
    "sglang_gate_problems",
    "sglang_parse_problems",
    "sglang_plan",
    "sglang_reshape",
)
