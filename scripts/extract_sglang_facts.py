#!/usr/bin/env python3
"""Extract the facts the SGLang simulator needs from a real SGLang install.

Run it with the interpreter of a venv that has the pinned SGLang installed
(importing sglang needs torch, but no GPU):

    /opt/sglang-probe/bin/python scripts/extract_sglang_facts.py          # 0.5.23
    /opt/sglang-0.5.17-probe/bin/python scripts/extract_sglang_facts.py   # 0.5.17

A CPU-only venv will do (0.5.18-0.5.22 were extracted on 2026-12-05 in one Python 3.11 venv with torch 2.13.0's CPU
build and each release installed ``--no-deps`` with its pinned transformers and tokenizers, plus the pure-Python
packages its imports need; PyPI's torchvision wheel needs CUDA torch, so its two ``register_fake`` lines were guarded
by ``torchvision.extension._has_ops()`` in that scratch venv: nothing it answers comes from torchvision).

It writes ``roles/sglang_plan/files/sglang-<version>.json`` and the simulator's own copy of it,
``simulator/src/sglang_simulator/data/sglang-<version>.json`` (byte-identical: tests/simulator/test_owns_its_model.py), for the
installed version (which must have an entry in ``RETIRED_FLAGS`` / ``RETIRED_ENV``).

The multimodal keys (below) are read from the source alone, so they can be refreshed in an
existing table from an unpacked wheel, with any Python and without torch; every other key is kept
byte for byte (how they were added to both tables):

    pip download --no-deps sglang==0.5.23 -d /tmp/w && unzip -q /tmp/w/sglang-*.whl 'sglang/*' -d /tmp/w
    python3 scripts/extract_sglang_facts.py --static /tmp/w/sglang
The output is deterministic: running it twice against the same install gives
a byte-identical file.  The ``flags`` list keeps the real parser's
registration order (argparse lists ambiguous-prefix candidates in that order,
and the simulator reproduces those messages); everything else is sorted.

What is read, and from where (paths relative to the ``sglang`` package):

* flags: ``srt/server_args.py`` ``ServerArgs.add_cli_args`` on an
  ``argparse.ArgumentParser(prog="sglang serve")``, exactly as
  ``prepare_server_args`` builds it, after ``srt/plugins.load_plugins()``
  (installed plugins, e.g. smg-grpc-servicer, add flags).
* architectures: ``srt/models/registry.py`` ``ModelRegistry`` (every
  ``EntryClass`` of ``srt/models/*.py``).  Modules that cannot be imported on
  a CPU-only host are read statically (their ``EntryClass`` assignment).
* speculative algorithms: ``srt/speculative/spec_info.py``
  ``SpeculativeAlgorithm`` plus the ``NEXTN`` alias of ``spec_registry.py``.
* environment: every ``SGLANG_*`` / ``SGL_*`` name that appears anywhere in
  the package source; the deprecation warnings of ``srt/environ.py`` (its
  ``_DEPRECATED_ENVS`` registry, or, in releases without one such as 0.5.17,
  its ``_print_deprecated_env`` / ``_warn_deprecated_env_to_cli_flag`` calls,
  read statically).
* multimodal start (read statically, see ``MULTIMODAL_KEYS``): the
  architectures SGLang treats as multimodal by default and those only
  ``--enable-multimodal`` turns on (``srt/configs/model_config.py``
  ``multimodal_model_archs`` and ``ModelConfig.__init__``), the non-generation
  architectures (``is_generation_model``), the model types and model path
  patterns for which SGLang picks a conversation template of its own
  (``srt/parser/conversation.py``), and the model types SGLang registers a
  processor of its own for (``srt/configs/*.py``).  The plan refuses a
  multimodal checkpoint whose tokenizer directory lacks what SGLang loads at
  start (its image processor) or after it (a chat template, for the warm-up).
* renamed / removed flags and removed environment variables: these are the
  one thing a single release cannot tell by itself.  They are listed below
  per release (``RETIRED_FLAGS``, ``RETIRED_ENV``) with their provenance and
  *verified* against the installed release: an entry is only written if the
  old name is really gone and its replacement really exists.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

# Per release: flags an earlier SGLang accepted that this release refuses.
# Value: the replacement, or None when the flag was retired without one.
#
# 0.5.23: the deprecated aliases (``DeprecatedAliasStoreAction`` /
# ``DeprecatedStoreTrueAction`` / ``DeprecatedStoreConstAction`` /
# ``DeprecatedAction`` registrations in the ``add_cli_args`` of
# python/sglang/srt/server_args.py of the 0.5.2x development line, e.g.
# ``--cuda-graph-max-bs`` -> ``new_flag="--cuda-graph-max-bs-decode"``).
# 0.5.23 dropped those registrations, so these spellings now fail with a bare
# "unrecognized arguments".  0.5.17 still registers most of them as deprecated
# aliases (accepted with a warning): they are NOT retired there.
_RETIRED_FLAGS_0_5_23: dict[str, str | None] = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs": "--cuda-graph-bs-decode",
    "--mamba-scheduler-strategy": "--mamba-radix-cache-strategy",
    "--stream-output": "--incremental-streaming-output",
    "--nsa-prefill-backend": "--dsa-prefill-backend",
    "--nsa-decode-backend": "--dsa-decode-backend",
    "--nsa-prefill-cp-mode": "--cp-strategy",
    "--speculative-dflash-draft-window-size": "--speculative-draft-window-size",
    "--enable-breakable-cuda-graph": "--cuda-graph-backend-prefill=breakable",
    "--disable-piecewise-cuda-graph": "--cuda-graph-backend-prefill=disabled",
    # The torch.compile piecewise backend (tc_piecewise) itself is gone.
    "--enforce-piecewise-cuda-graph": None,
    "--piecewise-cuda-graph-tokens": "--cuda-graph-bs-prefill",
    "--piecewise-cuda-graph-compiler": None,
    "--piecewise-cuda-graph-max-tokens": "--cuda-graph-max-bs-prefill",
    "--enable-nsa-prefill-context-parallel": "--enable-prefill-cp",
    "--enable-prefill-context-parallel": "--enable-prefill-cp",
    "--enable-gdn-replayssm-spec": "--enable-linear-replayssm-spec",
    "--enable-expert-distribution-metrics": "--expert-balancedness-report-mode",
    "--prefill-round-robin-balance": None,
    "--collect-tokens-histogram": None,
}
# 0.5.17: the flags SGLang 0.5.11 (the first release of the torch 2.11 line
# that 0.5.17 belongs to) registers in ServerArgs.add_cli_args of
# python/sglang/srt/server_args.py and 0.5.17 no longer accepts.  0.5.11's
# own help texts name the replacement where there is one
# ("--hybrid-kvcache-ratio is deprecated now. Please use
# --swa-full-tokens-ratio instead").
_RETIRED_FLAGS_0_5_17: dict[str, str | None] = {
    "--hybrid-kvcache-ratio": "--swa-full-tokens-ratio",
    # "Piecewise cuda graph is enabled by default" (a no-op since 0.5.11).
    "--enable-piecewise-cuda-graph": None,
    # "[Deprecated] Use SGLANG_SPEC_NAN_DETECTION=1 ..." in 0.5.11; both are gone in 0.5.17.
    "--enable-nan-detection": None,
    "--record-nolora-graph": None,
    "--no-record-nolora-graph": None,
    "--custom-sigquit-handler": None,
    "--debug-tensor-dump-inject": None,
}
# 0.5.18-0.5.22: each release's own parser compared with the release before it (the flag's "new_flag" in the
# release before the one that dropped it names the replacement), on top of the flags retired before.
_RETIRED_FLAGS_0_5_18: dict[str, str | None] = {**_RETIRED_FLAGS_0_5_17, "--torchao-config": None}
_RETIRED_FLAGS_0_5_19: dict[str, str | None] = dict(_RETIRED_FLAGS_0_5_18)
# 0.5.20 dropped the deprecated aliases 0.5.18 and 0.5.19 still registered (0.5.23's list, less the two whose
# replacement 0.5.20 still has in another form).
_RETIRED_FLAGS_0_5_20: dict[str, str | None] = {
    **_RETIRED_FLAGS_0_5_19,
    **{
        old: new
        for old, new in _RETIRED_FLAGS_0_5_23.items()
        if old not in ("--enforce-piecewise-cuda-graph", "--piecewise-cuda-graph-compiler")
    },
    "--enforce-piecewise-cuda-graph": "--cuda-graph-backend-prefill=tc_piecewise",
    "--piecewise-cuda-graph-compiler": "--cuda-graph-tc-compiler",
    "--dsa-prefill-cp-mode": "--cp-strategy",
    "--prefill-cp-mode": "--cp-strategy",
    "--enable-dsa-prefill-context-parallel": "--enable-prefill-cp",
}
_RETIRED_FLAGS_0_5_21: dict[str, str | None] = {
    **_RETIRED_FLAGS_0_5_20,
    "--elastic-ep-rejoin": None,
    "--keep-mm-feature-on-device": None,
}
# 0.5.22 dropped the torch.compile piecewise backend (cuda_graph_config.py: "tc_piecewise was removed") and its
# compiler flag.
_RETIRED_FLAGS_0_5_22: dict[str, str | None] = {
    **_RETIRED_FLAGS_0_5_21,
    "--enforce-piecewise-cuda-graph": None,
    "--piecewise-cuda-graph-compiler": None,
    "--cuda-graph-tc-compiler": None,
}
RETIRED_FLAGS: dict[str, dict[str, str | None]] = {
    "0.5.17": _RETIRED_FLAGS_0_5_17,
    "0.5.18": _RETIRED_FLAGS_0_5_18,
    "0.5.19": _RETIRED_FLAGS_0_5_19,
    "0.5.20": _RETIRED_FLAGS_0_5_20,
    "0.5.21": _RETIRED_FLAGS_0_5_21,
    "0.5.22": _RETIRED_FLAGS_0_5_22,
    "0.5.23": _RETIRED_FLAGS_0_5_23,
}

# Per release: environment variables an earlier SGLang read that this release
# no longer mentions anywhere, so setting them silently does nothing.
# Value: the variable that now carries the setting, or None.
#
# 0.5.23: the ``Envs`` registry and the deprecated-alias shims of
# python/sglang/srt/environ.py of the 0.5.2x line (SGLANG_ENABLE_SPEC_V2 was
# retired by "Retire Spec V1", PR #27964).
_RETIRED_ENV_0_5_23: dict[str, str | None] = {
    "SGLANG_ENABLE_SPEC_V2": None,
    "SGLANG_ENABLE_UNIFIED_RADIX_TREE": None,
    "SGLANG_ENABLE_GRPC": None,
    "SGLANG_SPEC_ENABLE_STRICT_FILTER_CHECK": None,
    "SGLANG_CUTLASS_MOE": None,
    "SGLANG_ENABLE_THINKING": "SGLANG_DEFAULT_THINKING",
    "SGLANG_REASONING_EFFORT": "SGLANG_DSV4_REASONING_EFFORT",
    "SGLANG_GC_LOG": "SGLANG_LOG_GC",
    "SGLANG_USE_JIT_ALL_REDUCE": "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
    "SGLANG_QUEUED_TIMEOUT_MS": "SGLANG_REQ_WAITING_TIMEOUT",
    "SGLANG_FORWARD_TIMEOUT_MS": "SGLANG_REQ_RUNNING_TIMEOUT",
}
# 0.5.17: the ``Envs`` of SGLang 0.5.11's python/sglang/srt/environ.py that
# appear nowhere in 0.5.17's source.
_RETIRED_ENV_0_5_17: dict[str, str | None] = {
    "SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS": None,
    "SGLANG_DISAGG_STAGING_BUFFER_SIZE_MB": None,
    "SGLANG_FLASHINFER_FORCE_POSIX_FD_TRANSPORT": None,
    "SGLANG_GRANIAN_PARENT_PID": None,
    "SGLANG_NSA_ENABLE_MTP_PRECOMPUTE_METADATA": None,
    "SGLANG_SPEC_ENABLE_STRICT_FILTER_CHECK": None,
    "SGLANG_SPEC_NAN_DETECTION": None,
    "SGLANG_SPEC_OOB_DETECTION": None,
    "SGLANG_SWA_EVICTION_INTERVAL_MULTIPLIER": None,
    "SGLANG_USE_FUSED_METADATA_COPY": None,
}
# Where each release's RETIRED_FLAGS / RETIRED_ENV entries come from (written into the table's "source").
_BETWEEN = "a comparison with the release before it (its add_cli_args flags and the deprecated aliases' new_flag)"
RETIRED_PROVENANCE: dict[str, str] = {
    "0.5.17": "a comparison with SGLang 0.5.11 (its add_cli_args flags and srt/environ.py Envs)",
    **{version: _BETWEEN for version in ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22")},
    "0.5.23": "the deprecation registrations of the 0.5.2x development line",
}
# 0.5.18-0.5.22: the variables of 0.5.17's and 0.5.23's lists this release no longer mentions (0.5.21 dropped
# all of 0.5.23's list but SGLANG_ENABLE_UNIFIED_RADIX_TREE, which 0.5.22 still reads).
_RETIRED_ENV_0_5_18: dict[str, str | None] = dict(_RETIRED_ENV_0_5_17)
_RETIRED_ENV_0_5_21: dict[str, str | None] = {
    **_RETIRED_ENV_0_5_17,
    **{old: new for old, new in _RETIRED_ENV_0_5_23.items() if old != "SGLANG_ENABLE_UNIFIED_RADIX_TREE"},
}
RETIRED_ENV: dict[str, dict[str, str | None]] = {
    "0.5.17": _RETIRED_ENV_0_5_17,
    "0.5.18": _RETIRED_ENV_0_5_18,
    "0.5.19": _RETIRED_ENV_0_5_18,
    "0.5.20": _RETIRED_ENV_0_5_18,
    "0.5.21": _RETIRED_ENV_0_5_21,
    "0.5.22": _RETIRED_ENV_0_5_21,
    "0.5.23": _RETIRED_ENV_0_5_23,
}

# The name argparse gives its own action classes, mapped to a stable kind.
_ACTION_KINDS: dict[str, str] = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "BooleanOptionalAction": "boolean_optional",
    "DeprecatedStoreTrueAction": "deprecated_store_true",
    "DeprecatedStoreConstAction": "deprecated_store_const",
    "DeprecatedAliasStoreAction": "deprecated_alias_store",
    "DeprecatedAction": "deprecated",
    "LoRAPathAction": "lora_paths",
}

# ``type=`` callables, by function name, mapped to what they accept.
_TYPE_NAMES: dict[str, str] = {
    "str": "str",
    "int": "int",
    "float": "float",
    "loads": "json",  # json.loads
    "json_list_type": "json_list",  # orjson.loads with its own error message
    "human_readable_int": "human_readable_int",  # 1k, 2Mi, ...
    "nullable_str": "nullable_str",  # "" / "None" -> None
    "parse_cuda_graph_config_arg": "cuda_graph_config",  # JSON object per phase
    "parse_cuda_graph_backend_arg": "cuda_graph_backend",  # rejects tc_piecewise
}


def jsonable(value: Any) -> Any:
    """Return ``value`` as plain JSON data, or raise if it has none."""
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items())}
    if hasattr(value, "value") and not isinstance(value, (str, int, float, bool)):
        return jsonable(value.value)  # enum members
    json.dumps(value, allow_nan=False)
    return value


def _action_kind(action: argparse.Action) -> str:
    cls = type(action)
    for klass in cls.__mro__:
        kind = _ACTION_KINDS.get(klass.__name__)
        if kind is not None:
            # Plugin subclasses of the store action keep store semantics.
            return kind
    return "other:" + cls.__name__


def _type_name(action: argparse.Action) -> str | None:
    if action.type is None:
        return None
    name = getattr(action.type, "__name__", type(action.type).__name__)
    return _TYPE_NAMES.get(name, "other:" + name)


def _describe(action: argparse.Action, provided_by: str) -> dict[str, Any]:
    nargs: Any = action.nargs
    choices: Any = None
    if action.choices is not None:
        raw = list(action.choices)
        # Sets have no stable order; lists keep theirs (argparse prints them).
        choices = sorted(raw) if isinstance(action.choices, (set, frozenset)) else raw
        choices = jsonable(choices)
    entry: dict[str, Any] = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": _action_kind(action),
        "nargs": nargs,
        "type": _type_name(action),
        "choices": choices,
        "default": jsonable(action.default),
        "const": jsonable(action.const),
        "required": bool(action.required),
        "provided_by": provided_by,
    }
    new_flag = getattr(action, "new_flag", None)
    if new_flag is not None:
        entry["deprecated_use_instead"] = new_flag
    const_value = getattr(action, "const_value", None)
    if const_value is not None:
        entry["const"] = jsonable(const_value)
    return entry


def _build_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _flags() -> list[dict[str, Any]]:
    # Build once before and once after loading plugins; the difference is
    # what installed plugins contribute.
    base = {tuple(a.option_strings) for a in _build_parser()._actions}
    from sglang.srt.plugins import load_plugins

    load_plugins()
    parser = _build_parser()
    out = []
    for action in parser._actions:
        key = tuple(action.option_strings)
        out.append(_describe(action, "sglang" if key in base else _plugin_of(action)))
    return out


def _plugin_of(action: argparse.Action) -> str:
    module = type(action).__module__.split(".")[0]
    try:
        from importlib.metadata import packages_distributions

        dists = packages_distributions().get(module)
        if dists:
            return sorted(dists)[0]
    except Exception:
        pass
    return module


def _static_entry_classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names += [v.id for v in values if isinstance(v, ast.Name)]
    return names


def _architectures(pkg: Path) -> tuple[list[str], list[str]]:
    """Return (architectures, modules read statically)."""
    import importlib

    from sglang.srt.models.registry import ModelRegistry

    archs = set(ModelRegistry.get_supported_archs())
    static_only: list[str] = []
    for path in sorted((pkg / "srt" / "models").glob("*.py")):
        if path.name.startswith("_") or "EntryClass" not in path.read_text():
            continue
        modname = "sglang.srt.models." + path.stem
        try:
            importlib.import_module(modname)
        except Exception:
            static_only.append(path.stem)
            archs.update(_static_entry_classes(path))
    return sorted(archs), static_only


def _speculative() -> tuple[list[str], dict[str, str]]:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import _RESERVED_ALIASES

    def target(alias: str) -> str:
        try:
            return str(SpeculativeAlgorithm.from_string(alias).name)
        except ValueError:
            # 0.5.17 resolves NEXTN in the server-args hook before from_string sees it.
            from sglang.srt.arg_groups.speculative_hook import _resolve_speculative_algorithm_alias

            return str(SpeculativeAlgorithm.from_string(_resolve_speculative_algorithm_alias(alias, None)).name)

    names = {m.name for m in SpeculativeAlgorithm if m.name != "NONE"}
    aliases = {alias: target(alias) for alias in sorted(_RESERVED_ALIASES)}
    return sorted(names | set(aliases)), aliases


def _env_names(pkg: Path) -> list[str]:
    pattern = re.compile(r"\b(?:SGLANG|SGL)_[A-Z0-9_]+")
    names: set[str] = set()
    for path in pkg.rglob("*.py"):
        names.update(pattern.findall(path.read_text(errors="replace")))
    return sorted(names)


def _literal_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
    return None


def _deprecated_env_static(path: Path) -> dict[str, str]:
    """The warnings of an environ.py without a ``_DEPRECATED_ENVS`` registry (0.5.17), read from its calls.

    ``_print_deprecated_env(old[, new])``, ``_warn_deprecated_env_to_cli_flag(name, suggestion)`` and the
    ``_deprecated_ms_to_s`` mapping, with the message each one prints.
    """
    tree = ast.parse(path.read_text())
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [_literal_str(arg) for arg in node.args]
            if node.func.id == "_print_deprecated_env" and args and args[0]:
                if len(args) == 1:
                    out[args[0]] = f"Environment variable {args[0]} has been deprecated."
                elif args[1]:
                    out[args[0]] = f"Environment variable {args[0]} will be deprecated, please use {args[1]} instead"
            elif node.func.id == "_warn_deprecated_env_to_cli_flag" and len(args) == 2 and args[0] and args[1]:
                out[args[0]] = f"Environment variable {args[0]} is deprecated. {args[1]}"
        elif (
            isinstance(node, ast.AnnAssign | ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(
                isinstance(t, ast.Name) and t.id == "_deprecated_ms_to_s"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        ):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                old, new = _literal_str(key) if key else None, _literal_str(value)
                if old and new:
                    out[old] = f"Environment variable {old} (in ms) is deprecated, please use {new} (in seconds) instead"
    return dict(sorted(out.items()))


def _deprecated_env(pkg: Path) -> dict[str, str]:
    from sglang.srt import environ

    if not hasattr(environ, "_DEPRECATED_ENVS"):
        return _deprecated_env_static(pkg / "srt" / "environ.py")
    out = {}
    for name, dep in sorted(environ._DEPRECATED_ENVS.items()):
        message = f"Environment variable {name} is deprecated."
        if dep.replacement is not None:
            message += f" Please use {dep.replacement} instead."
        if dep.note is not None:
            message += f" {dep.note}"
        out[name] = message
    return out


def _cuda_graph_config_keys() -> dict[str, list[str]]:
    from sglang.srt.model_executor.cuda_graph_config import ALLOWED_KEYS_PER_PHASE

    return {phase: list(keys) for phase, keys in sorted(ALLOWED_KEYS_PER_PHASE.items())}


def _record_fields() -> list[Any]:
    """The fields of ``ServerArgs``: a msgspec record (0.5.23) or a dataclass (0.5.17)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    if dataclasses.is_dataclass(ServerArgs):
        return list(dataclasses.fields(ServerArgs))
    from sglang.srt.arg_groups.arg_utils import record_fields

    return list(record_fields(ServerArgs))


def _no_default(value: Any) -> bool:
    import dataclasses

    if value is dataclasses.MISSING:
        return True
    try:
        import msgspec
    except ImportError:
        return False
    return value is msgspec.NODEFAULT


def _record_only_fields(flags: list[dict[str, Any]]) -> dict[str, Any]:
    """ServerArgs fields with no command-line flag, with their defaults.

    ``/server_info`` reports every field of the record, these included.
    """
    dests = {f["dest"] for f in flags}
    out: dict[str, Any] = {}
    for field in _record_fields():
        if field.name in dests or field.name.startswith("_"):
            continue
        default = field.default
        if _no_default(default) and not _no_default(field.default_factory):
            default = field.default_factory()
        elif _no_default(default):
            default = None
        try:
            out[field.name] = jsonable(default)
        except (TypeError, ValueError):
            out[field.name] = None
    return dict(sorted(out.items()))


def _non_field_dests(flags: list[dict[str, Any]]) -> list[str]:
    """Parser destinations that ``ServerArgs.from_cli_args`` drops."""
    fields = {field.name for field in _record_fields()}
    return sorted({f["dest"] for f in flags if f["dest"] not in fields} - {"help"})


def _verify_retired_flags(flags: list[dict[str, Any]], version: str) -> tuple[dict[str, str], list[str]]:
    known = {opt for f in flags for opt in f["option_strings"]}
    renamed: dict[str, str] = {}
    removed: list[str] = []
    for old, new in sorted(RETIRED_FLAGS[version].items()):
        if old in known:
            raise SystemExit(f"{old} is still accepted; drop it from RETIRED_FLAGS")
        if new is None:
            removed.append(old)
            continue
        if new.split("=", 1)[0] not in known:
            raise SystemExit(f"replacement {new} of {old} is not a flag of this release")
        renamed[old] = new
    return renamed, removed


def _verify_retired_env(env_names: list[str], version: str) -> tuple[list[str], dict[str, str]]:
    present = set(env_names)
    replacements = {}
    for old, new in sorted(RETIRED_ENV[version].items()):
        if old in present:
            raise SystemExit(f"{old} is still referenced; drop it from RETIRED_ENV")
        if new is not None:
            if new not in present:
                raise SystemExit(f"replacement {new} of {old} is unknown to this release")
            replacements[old] = new
    return sorted(RETIRED_ENV[version]), replacements


# ---------------------------------------------------------------------------
# What SGLang does at start with a multimodal checkpoint, read statically from the package source (no import: the
# lists are module-level literals, and reading them needs no torch). ``--static <unpacked sglang package>`` refreshes
# only these keys of an existing table (see main()).
#
# * multimodal_architectures: ``multimodal_model_archs`` of ``srt/configs/model_config.py`` (what
#   ``is_multimodal_model`` matches; ``*NAME`` entries resolved from the module's own tuples) minus what
#   ``ModelConfig.__init__`` turns off while ``enable_multimodal is None`` (``mm_disabled_models``: Gemma 3, Llama 4,
#   Step3-VL, ...; and MiMo-V2, on only when its config has vision_config and audio_config). For these SGLang builds
#   the model's processor at start from the tokenizer directory (``TokenizerManager.init_tokenizer_and_processor``).
#   ``SGLANG_EXTERNAL_MM_MODEL_ARCH`` (one more, from the environment) is not in the table.
# * multimodal_architectures_opt_in: the ones turned off by default; ``--enable-multimodal`` turns them on.
# * non_generation_architectures: those ``is_generation_model`` names (embedding, reward, classification models):
#   their warm-up is /encode, never a chat completion.
# * conversation_template_model_types / conversation_template_path_patterns: what the matching functions of
#   ``srt/parser/conversation.py`` (``get_conv_template_by_model_path``, which ``TemplateManager.load_chat_template``
#   asks before the tokenizer's own template) look for: config.json model types (``MODEL_TYPE_TO_TEMPLATE`` and
#   ``model_type == "..."``) and regular expressions searched in the model path (``re.search`` patterns, and
#   ``"..." in model_path.lower()`` as an escaped pattern), each prefixed (?i) where SGLang ignores case. A pattern
#   that makes a function return None (an exclusion) is listed as well: the plan only skips a check on a match.
# * own_processor_model_types: the model types of the config classes in ``srt/configs/*.py`` SGLang registers a
#   processor of its own for (``AutoProcessor.register``, ``register_processor``, ``@register_customized_processor``):
#   that processor, not transformers', decides which files it reads (DeepSeek-VL2's reads the tokenizer only).

MULTIMODAL_KEYS = (
    "multimodal_architectures",
    "multimodal_architectures_opt_in",
    "non_generation_architectures",
    "conversation_template_model_types",
    "conversation_template_path_patterns",
    "own_processor_model_types",
)
# The sentence main() ends the table's "source" with, naming where MULTIMODAL_KEYS come from.
MULTIMODAL_SOURCE = (
    "Multimodal architectures (on by default, and turned on by --enable-multimodal), non-generation architectures, "
    "the conversation templates guessed from the model path and the model types with a processor of SGLang's own: "
    "read statically from srt/configs/model_config.py, srt/parser/conversation.py and srt/configs/*.py."
)


def _module(path: Path) -> ast.Module:
    if not path.is_file():
        raise SystemExit(f"{path} is missing: this release is laid out differently, update the extraction")
    return ast.parse(path.read_text())


def _module_strings(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a literal list, tuple or set of strings (frozenset({...}) too)."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        value = getattr(node, "value", None)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.args:
            value = value.args[0]  # frozenset({...}), tuple([...])
        if isinstance(target, ast.Name) and isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            items = [_literal_str(item) for item in value.elts]
            if items and all(item is not None for item in items):
                found[target.id] = [item for item in items if item is not None]
    return found


def _assigns(node: ast.AST, name: str) -> bool:
    """True when `node` is an assignment to the name `name`."""
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)


def _strings_of(node: ast.AST, names: dict[str, list[str]], where: str) -> list[str]:
    """The strings of a list/tuple/set literal (``*NAME`` and NAME resolved through `names`)."""
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        raise SystemExit(f"{where}: not a literal list of names ({ast.unparse(node)})")
    out: list[str] = []
    for item in node.elts:
        text = _literal_str(item)
        if text is not None:
            out.append(text)
        elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name) and item.value.id in names:
            out += names[item.value.id]
        else:
            raise SystemExit(f"{where}: cannot read {ast.unparse(item)}")
    return out


def _multimodal_architectures(pkg: Path) -> tuple[list[str], list[str]]:
    """(on by default, turned on only by --enable-multimodal), from srt/configs/model_config.py."""
    path = pkg / "srt" / "configs" / "model_config.py"
    tree = _module(path)
    names = _module_strings(tree)
    listed: list[str] | None = None
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and _assigns(statement, "multimodal_model_archs"):
            listed = _strings_of(statement.value, names, f"{path} multimodal_model_archs")
    if not listed:
        raise SystemExit(f"{path}: no module-level multimodal_model_archs list")
    # Inside `if enable_multimodal is None:`, every `<...>.architectures[0] in X` test of a branch that sets
    # enable_multimodal = False names architectures that stay text-only unless --enable-multimodal is given.
    local = dict(names)
    off: set[str] = set()
    default_block = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    items = [_literal_str(item) for item in node.value.elts]
                    if items and all(item is not None for item in items):
                        local[target.id] = [item for item in items if item is not None]
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "enable_multimodal"
            and isinstance(node.test.ops[0], ast.Is)
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value is None
        ):
            default_block = node
    if default_block is None:
        raise SystemExit(f"{path}: no `if enable_multimodal is None:` block")
    for branch in ast.walk(default_block):
        if not isinstance(branch, ast.If):
            continue
        sets_off = any(
            isinstance(stmt, ast.Assign)
            and _assigns(stmt, "enable_multimodal")
            and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is False
            for stmt in branch.body
        )
        if not sets_off:
            continue
        for test in ast.walk(branch.test):
            if (
                isinstance(test, ast.Compare)
                and isinstance(test.ops[0], ast.In)
                and isinstance(test.left, ast.Subscript)
                and "architectures" in ast.unparse(test.left)
            ):
                off.update(_strings_of(test.comparators[0], local, f"{path} enable_multimodal default"))
    if not off:
        raise SystemExit(f"{path}: no architecture is off by default; check the enable_multimodal block")
    return sorted(set(listed) - off), sorted(set(listed) & off)


def _non_generation_architectures(pkg: Path) -> list[str]:
    """The architectures ``is_generation_model`` of srt/configs/model_config.py says are not generation models."""
    path = pkg / "srt" / "configs" / "model_config.py"
    for node in _module(path).body:
        if isinstance(node, ast.FunctionDef) and node.name == "is_generation_model":
            found = {
                text
                for test in ast.walk(node)
                if isinstance(test, ast.Compare)
                and isinstance(test.ops[0], ast.In)
                and isinstance(test.comparators[0], ast.Name)
                and test.comparators[0].id == "model_architectures"
                and (text := _literal_str(test.left)) is not None
            }
            if found:
                return sorted(found)
    raise SystemExit(f'{path}: no is_generation_model with `"..." in model_architectures` tests')


def _ignores_case(call: ast.Call) -> bool:
    return any("IGNORECASE" in ast.unparse(arg) or ast.unparse(arg) == "re.I" for arg in [*call.args[2:], *call.keywords])


def _conversation_templates(pkg: Path) -> tuple[list[str], list[str]]:
    """(config.json model types, model path patterns) for which SGLang picks a conversation template of its own."""
    path = pkg / "srt" / "parser" / "conversation.py"
    tree = _module(path)
    by_type: dict[str, Any] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and _assigns(statement, "MODEL_TYPE_TO_TEMPLATE"):
            by_type = ast.literal_eval(statement.value)
    types: set[str] = set()
    patterns: set[str] = set()
    matchers = [
        statement
        for statement in tree.body
        if isinstance(statement, ast.FunctionDef)
        and any(isinstance(d, ast.Name) and d.id == "register_conv_template_matching_function" for d in statement.decorator_list)
    ]
    if not matchers:
        raise SystemExit(f"{path}: no @register_conv_template_matching_function")
    for function in matchers:
        where = f"{path} {function.name}"
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id == "MODEL_TYPE_TO_TEMPLATE":
                if not by_type:
                    raise SystemExit(f"{path}: {function.name} reads MODEL_TYPE_TO_TEMPLATE, which is no literal dict")
                types.update(str(key) for key in by_type)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("re.search", "re.match", "re.fullmatch"):
                pattern = _literal_str(node.args[0]) if node.args else None
                if pattern is None:
                    raise SystemExit(f"{path}: {function.name}: a pattern that is no literal ({ast.unparse(node)})")
                if ast.unparse(node.func) != "re.search":
                    pattern = "^" + pattern
                patterns.add(("(?i)" if _ignores_case(node) else "") + pattern)
            elif isinstance(node, ast.Compare) and re.search(r"\bmodel_(path|type)\b", ast.unparse(node)):
                left, other = ast.unparse(node.left), ast.unparse(node.comparators[0])
                text = _literal_str(node.left)
                if len(node.ops) != 1:
                    raise SystemExit(f"{path}: {function.name}: cannot read {ast.unparse(node)}")
                if text is not None and isinstance(node.ops[0], ast.In) and other.startswith("model_path"):
                    patterns.add(("(?i)" if other.endswith(".lower()") else "") + re.escape(text))
                elif left == "model_type" and isinstance(node.ops[0], ast.In):
                    types.update(_strings_of(node.comparators[0], {}, where))
                elif left == "model_type" and isinstance(node.ops[0], ast.Eq) and (value := _literal_str(node.comparators[0])):
                    types.add(value)
                else:
                    raise SystemExit(f"{path}: {function.name}: cannot read {ast.unparse(node)}")
    return sorted(types), sorted(patterns)


def _decorator_processor(decorator: ast.expr) -> str | None:
    """The processor class of ``@register_customized_processor(P)`` / ``(processor_class=P)``."""
    if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("register_customized_processor")):
        return None
    for arg in [*decorator.args, *(keyword.value for keyword in decorator.keywords)]:
        return ast.unparse(arg)
    return None


def _own_processor_model_types(pkg: Path) -> list[str]:
    """The model types of the config classes srt/configs/*.py registers a processor of SGLang's own for."""
    model_types: dict[str, str] = {}
    registered: list[tuple[Path, str]] = []
    for path in sorted((pkg / "srt" / "configs").glob("*.py")):
        tree = _module(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "model_type" for t in stmt.targets)
                        and (value := _literal_str(stmt.value)) is not None
                    ):
                        model_types[node.name] = value
                if any(_decorator_processor(decorator) for decorator in node.decorator_list):
                    registered.append((path, node.name))
        for stmt in tree.body:  # module-level calls (register_processor's own body passes its parameters on)
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (
                isinstance(call, ast.Call)
                and ast.unparse(call.func) in ("AutoProcessor.register", "register_processor")
                and call.args
                and isinstance(call.args[0], ast.Name)
            ):
                registered.append((path, call.args[0].id))
    found = set()
    for path, config_class in registered:
        if config_class not in model_types:
            raise SystemExit(f"{path}: {config_class} gets a processor but has no literal model_type")
        found.add(model_types[config_class])
    if not found:
        raise SystemExit(f"{pkg / 'srt' / 'configs'}: no processor registration found")
    return sorted(found)


def multimodal_facts(pkg: Path) -> dict[str, list[str]]:
    """The MULTIMODAL_KEYS of the table, read from the package source at `pkg`."""
    default, opt_in = _multimodal_architectures(pkg)
    types, patterns = _conversation_templates(pkg)
    facts = {
        "multimodal_architectures": default,
        "multimodal_architectures_opt_in": opt_in,
        "non_generation_architectures": _non_generation_architectures(pkg),
        "conversation_template_model_types": types,
        "conversation_template_path_patterns": patterns,
        "own_processor_model_types": _own_processor_model_types(pkg),
    }
    assert tuple(sorted(facts)) == tuple(sorted(MULTIMODAL_KEYS))
    return facts


def main() -> int:
    for name in ("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", "SGLANG_PLUGINS", "SGLANG_PLATFORM"):
        if os.environ.get(name):
            print(f"unset {name}: it changes the parser", file=sys.stderr)
            return 2
    logging.disable(logging.WARNING)
    import warnings

    warnings.simplefilter("ignore")

    import sglang

    pkg = Path(sglang.__file__).resolve().parent
    if sglang.__version__ not in RETIRED_FLAGS or sglang.__version__ not in RETIRED_ENV:
        print(
            f"sglang {sglang.__version__}: add its entries to RETIRED_FLAGS and RETIRED_ENV first "
            f"(known: {', '.join(sorted(RETIRED_FLAGS))})",
            file=sys.stderr,
        )
        return 2
    flags = _flags()
    archs, static_only = _architectures(pkg)
    algorithms, aliases = _speculative()
    env_names = _env_names(pkg)
    renamed, removed = _verify_retired_flags(flags, sglang.__version__)
    removed_env, env_replacements = _verify_retired_env(env_names, sglang.__version__)
    plugins = sorted({f["provided_by"] for f in flags} - {"sglang"})

    data = {
        "sglang_version": sglang.__version__,
        "source": (
            f"Extracted by scripts/extract_sglang_facts.py from the installed "
            f"sglang {sglang.__version__} wheel: flags from "
            "sglang.srt.server_args.ServerArgs.add_cli_args on "
            "argparse.ArgumentParser(prog='sglang serve') after "
            "sglang.srt.plugins.load_plugins() (plugins: "
            + (", ".join(plugins) or "none")
            + "); architectures from sglang.srt.models.registry.ModelRegistry"
            + (" plus the EntryClass of modules not importable on CPU (" + ", ".join(static_only) + ")" if static_only else "")
            + "; speculative algorithms from sglang.srt.speculative.spec_info; "
            "environment names from the package source; renamed/removed flags and "
            f"environment variables from {RETIRED_PROVENANCE[sglang.__version__]}, "
            "verified absent from this release. " + MULTIMODAL_SOURCE
        ),
        "flags": flags,
        "cuda_graph_config_keys": _cuda_graph_config_keys(),
        "record_only_fields": _record_only_fields(flags),
        "non_field_dests": _non_field_dests(flags),
        "renamed_flags": renamed,
        "removed_flags": removed,
        "removed_environment": removed_env,
        "removed_environment_replacements": env_replacements,
        "deprecated_environment": _deprecated_env(pkg),
        "environment_names": env_names,
        "architectures": archs,
        "speculative_algorithms": algorithms,
        "speculative_algorithm_aliases": aliases,
        **multimodal_facts(pkg),
    }
    for out in table_paths(sglang.__version__):
        out.write_text(dump(data))
        print(f"wrote {out}: {len(flags)} flags, {len(archs)} architectures", file=sys.stderr)
    return 0


def table_path(version: str) -> Path:
    """The product's knowledge of SGLang (the plan role reads it)."""
    return Path(__file__).resolve().parents[1] / "roles" / "sglang_plan" / "files" / f"sglang-{version}.json"


def simulator_table_path(version: str) -> Path:
    """The simulator's own copy of the table (it reads nothing of the product's)."""
    return Path(__file__).resolve().parents[1] / "simulator" / "src" / "sglang_simulator" / "data" / f"sglang-{version}.json"


def table_paths(version: str) -> tuple[Path, Path]:
    """Where the table is written: the product's, and the simulator's copy."""
    return table_path(version), simulator_table_path(version)


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def source_version(pkg: Path) -> str:
    """The version of an unpacked sglang package, from its generated _version.py (read, not imported)."""
    for node in _module(pkg / "_version.py").body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            version = _literal_str(node.value)
            if version:
                return version
    raise SystemExit(f"{pkg / '_version.py'}: no literal __version__")


def refresh_static(pkg: Path) -> int:
    """``--static <sglang package directory>``: rewrite MULTIMODAL_KEYS (and the source's sentence on them) of the
    existing table of that release from its source, without importing it; every other key is kept as it is."""
    version = source_version(pkg)
    out = table_path(version)
    if not out.is_file():
        print(f"{out} does not exist: run the full extraction for sglang {version} first", file=sys.stderr)
        return 2
    data = json.loads(out.read_text())
    if data.get("sglang_version") != version:
        print(f"{out} is for sglang {data.get('sglang_version')}, the package is {version}", file=sys.stderr)
        return 2
    source = str(data["source"])
    data["source"] = source[: source.index(MULTIMODAL_SOURCE)].rstrip() if MULTIMODAL_SOURCE in source else source
    data["source"] += " " + MULTIMODAL_SOURCE
    data.update(multimodal_facts(pkg))
    for copy in table_paths(version):
        copy.write_text(dump(data))
        print(f"wrote {copy}: {len(data['multimodal_architectures'])} multimodal architectures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--static":
        sys.exit(refresh_static(Path(sys.argv[2]).resolve()))
    if len(sys.argv) > 1:
        sys.exit("usage: extract_sglang_facts.py [--static <unpacked sglang package directory>]")
    sys.exit(main())
