"""What each supported SGLang version knows (its support table: flags, renamed and removed flags, environment
variables, architectures, speculative algorithms, how a multimodal checkpoint starts), and the checks of a flag against
the pinned version's table, naming the other versions that differ."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import HostProblems


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
    # How this version starts a multimodal checkpoint (scripts/extract_sglang_facts.py, MULTIMODAL_KEYS): the
    # architectures multimodal by default and those --enable-multimodal turns on, the architectures that generate
    # nothing (their warm-up is /encode), the model types and model path patterns for which it picks a conversation
    # template of its own, and the model types it has a processor of its own for.
    multimodal_architectures: frozenset[str] = frozenset()
    multimodal_architectures_opt_in: frozenset[str] = frozenset()
    non_generation_architectures: frozenset[str] = frozenset()
    conversation_template_model_types: frozenset[str] = frozenset()
    conversation_template_path_patterns: tuple[str, ...] = ()
    own_processor_model_types: frozenset[str] = frozenset()
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
            multimodal_architectures=frozenset(table.get("multimodal_architectures", [])),
            multimodal_architectures_opt_in=frozenset(table.get("multimodal_architectures_opt_in", [])),
            non_generation_architectures=frozenset(table.get("non_generation_architectures", [])),
            conversation_template_model_types=frozenset(table.get("conversation_template_model_types", [])),
            conversation_template_path_patterns=tuple(table.get("conversation_template_path_patterns", [])),
            own_processor_model_types=frozenset(table.get("own_processor_model_types", [])),
        )


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def pinned_support(
    problems: HostProblems, version: str, tables: Sequence[Mapping[str, Any]] | Mapping[str, Any]
) -> Support | None:
    """The pinned version's support, knowing the other versions; None (with one problem) when there is no table."""
    listed = [tables] if isinstance(tables, Mapping) else list(tables)
    supports = sorted((Support.load(table) for table in listed), key=lambda s: version_key(s.version), reverse=True)
    by_version = {support.version: support for support in supports}
    if not version and len(supports) == 1:
        version = supports[0].version
    pinned = by_version.get(version)
    if pinned is None:
        known = ", ".join(sorted(by_version, key=version_key)) or "none"
        problems.add(
            "host",
            "sglang_version",
            version,
            f"sglang-fleet has no support table for SGLang {version} (supported: {known})",
            "pin one of the supported versions",
        )
        return None
    pinned.others = tuple(support for support in supports if support is not pinned)
    return pinned


def since(versions: Sequence[str]) -> str:
    """The versions (newest first, as versions_with gives them) as "SGLang 0.5.17-0.5.20, 0.5.23": oldest first, runs
    of consecutive releases as one range."""
    runs: list[list[str]] = []
    for version in sorted(versions, key=version_key):
        last = runs[-1][-1] if runs else ""
        key, before = version_key(version), version_key(last) if last else ()
        if before and key[:-1] == before[:-1] and key[-1] == before[-1] + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return "SGLang " + ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


# Options whose value is a secret: in sglang_server_args it would land in the 0644 unit, in --diff and in /proc.
SECRET_DESTS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})
SECRET_DEST = re.compile(r"(^|_)(api_keys?|password|passwd|secret|credentials?)($|_)")
HIDDEN = "<hidden>"


def secret_dest(dest: str) -> bool:
    """Whether an option's argparse dest names a secret."""
    return dest in SECRET_DESTS or bool(SECRET_DEST.search(dest))


def secret_flag(support: Support, flag: str) -> bool:
    """Whether a value given for `flag` may be a secret: its own name (known or not) or the known flag nearest to it
    (a misspelling, "--api-keys" for --api-key) names one. Its value is then never shown in a problem."""
    if secret_dest(flag.lstrip("-").replace("-", "_").lower()):
        return True
    known = support.flags.get(flag)
    if known is not None:  # a known flag is its own nearest
        return secret_dest(known.dest or "")
    nearest = difflib.get_close_matches(flag, list(support.flags), n=3, cutoff=0.6)
    return any(secret_dest(support.flags[name].dest or name.lstrip("-").replace("-", "_")) for name in nearest)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def gone_since(support: Support, flag: str) -> str:
    """When `flag` (retired in `support`'s version) went: after the newest older supported release that still accepts
    it, in the first supported release after that one (every release from 0.5.17 on has a table, so that is the
    release that removed it), as "after SGLang 0.5.19 (gone in 0.5.20; deprecated in 0.5.19)"; "" when no older
    supported release has it."""
    older = [o for o in support.others if _release(o.version) < _release(support.version) and flag in o.flags]
    if not older:
        return ""
    last = max(older, key=lambda other: _release(other.version))
    gone = min(
        (o for o in (support, *support.others) if _release(last.version) < _release(o.version) <= _release(support.version)),
        key=lambda other: _release(other.version),
    )
    deprecated = f"; deprecated in {last.version}" if last.flags[flag].deprecated else ""
    return f" after SGLang {last.version} (gone in {gone.version}{deprecated})"


def check_flag(problems: HostProblems, support: Support, where: str, variable: str, flag: str, value: Any) -> bool:
    """True when `flag` is a flag the pinned SGLang knows and `value` fits it; otherwise records why not (the value
    shown as <hidden> for a flag that may be a secret: secret_flag)."""
    shown = HIDDEN if secret_flag(support, flag) else value
    if flag in support.renamed_flags:
        still = support.versions_with(lambda other: has_flag(other, flag))
        went = gone_since(support, flag)
        problems.add(
            where,
            variable,
            shown,
            (f"{flag} was removed{went}" if went else f"{flag} does not exist in SGLang {support.version}")
            + (f" ({since(still)} has it)" if still else ""),
            f"use {support.renamed_flags[flag]}" + (f" or pin sglang_version {still[0]}" if still else ""),
        )
        return False
    if flag in support.removed_flags:
        still = support.versions_with(lambda other: has_flag(other, flag))
        went = gone_since(support, flag) or f" in SGLang {support.version}"
        problems.add(
            where,
            variable,
            shown,
            f"{flag} was removed{went}" + (f" ({since(still)} has it)" if still else ""),
            "remove the setting" + (f" or pin sglang_version {still[0]}" if still else ""),
        )
        return False
    known = support.flags.get(flag)
    if known is None:
        # Known to another supported version: say which, and what this version calls it, if anything.
        having = support.versions_with(lambda other: has_flag(other, flag))
        if having:
            fix = "remove it"
            names = names_in(support, flag)
            if names:
                fix = f"use {names[0]} (its name in SGLang {support.version})"
            problems.add(
                where,
                variable,
                shown,
                f"SGLang {support.version} has no flag {flag} ({since(having)} has it)",
                f"{fix} or pin sglang_version {having[0]}",
            )
            return False
        close = difflib.get_close_matches(flag, list(support.flags), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "see `python -m sglang.launch_server --help`"
        problems.add(where, variable, shown, f"SGLang {support.version} has no flag {flag}", hint)
        return False
    if not known.takes_value and not isinstance(value, bool):
        problems.add(where, variable, shown, f"{flag} is a switch", "set it to true or false")
        return False
    if known.takes_value and isinstance(value, bool):
        problems.add(where, variable, shown, f"{flag} takes a value, not true/false", "give its value")
        return False
    if known.takes_value and isinstance(value, list) and not known.many:
        problems.add(where, variable, shown, f"{flag} takes one value", "give a single value")
        return False
    expected = {"int": (int,), "float": (int, float)}.get(known.type or "")
    items = value if isinstance(value, list) else [value]
    if expected and any(isinstance(item, bool) or not isinstance(item, expected) for item in items):
        problems.add(where, variable, shown, f"{flag} takes a number ({known.type})", "give a number without quotes")
        return False
    if known.choices and value is not None and value not in known.choices:
        choices = ", ".join(str(choice) for choice in known.choices)
        problems.add(where, variable, shown, f"{flag} accepts {choices}", "pick one of them")
        return False
    return True


def has_flag(support: Support, flag: str) -> bool:
    """True when `flag` is a regular flag of `support`'s version (not only a deprecated alias)."""
    known = support.flags.get(flag)
    return known is not None and not known.deprecated


def names_in(support: Support, flag: str) -> list[str]:
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
