"""Environment variables SGLang 0.5.23 does not read.

Real SGLang ignores an unknown or retired ``SGLANG_*`` variable silently (for
example ``SGLANG_ENABLE_SPEC_V2``, retired with Spec V1).  The simulator
ignores them too, but says so in one warning line, so an operator sees that
a setting they rely on does nothing.  Variables that 0.5.23 still recognises
as deprecated get the same warning real SGLang prints.
"""

from __future__ import annotations

from collections.abc import Mapping

from .facts import Facts


def _known(name: str, facts: Facts) -> bool:
    if name in facts.environment_names:
        return True
    # Names used as prefixes in SGLang's source (e.g. "SGLANG_HICACHE_").
    return any(p.endswith("_") and name.startswith(p) for p in facts.environment_names)


def deprecation_warnings(env: Mapping[str, str], facts: Facts) -> list[str]:
    """The warnings real SGLang 0.5.23 itself prints (srt/environ.py)."""
    lines = [
        f"UserWarning: {msg}" for name, msg in sorted(facts.deprecated_environment.items()) if name in env
    ]
    for key in sorted(env):
        if key.startswith("SGL_") and key not in facts.deprecated_environment:
            lines.append(
                f"UserWarning: Environment variable {key} is deprecated, please use "
                f"{key.replace('SGL_', 'SGLANG_', 1)}"
            )
    return lines


def ignored_variables(env: Mapping[str, str], facts: Facts) -> list[str]:
    """``NAME (why)`` for every SGLANG_*/SGL_* variable SGLang will not read."""
    out: list[str] = []
    for key in sorted(env):
        if key.startswith("SGL_"):
            name = key.replace("SGL_", "SGLANG_", 1)
        elif key.startswith("SGLANG_"):
            name = key
        else:
            continue
        if name.startswith("SGLANG_SIM_") or name in facts.deprecated_environment:
            continue
        if name in facts.removed_environment:
            replacement = facts.removed_environment_replacements.get(name)
            why = f"retired; use {replacement}" if replacement else "retired"
            out.append(f"{key} ({why})")
        elif not _known(name, facts) and not _known(key, facts):
            out.append(f"{key} (unknown)")
    return out


def ignored_warning(env: Mapping[str, str], facts: Facts) -> str | None:
    names = ignored_variables(env, facts)
    if not names:
        return None
    return (
        f"SGLang {facts.sglang_version} does not read these environment variables, so "
        f"they have no effect (real SGLang ignores them silently): {', '.join(names)}"
    )
