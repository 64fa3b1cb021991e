"""The ``sglang serve`` command line, rebuilt from the recorded flag table.

The parser is a plain ``argparse.ArgumentParser(prog="sglang serve")`` with
the same actions, in the same order, as SGLang 0.5.23 registers them, so
unknown flags, ambiguous prefixes, accepted abbreviations, choices and type
errors behave (and read) exactly like the real thing.  One addition: when a
flag that an earlier SGLang accepted is used, the error also names what to
use instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, NoReturn

from .facts import Facts, Flag, load_facts

PROG = "sglang serve"
_YELLOW = "\033[1;33m"
_RESET = "\033[0m"


# ---------------------------------------------------------------------------
# type= converters.  argparse names the converter in its error message
# ("invalid int value"), so the JSON parser keeps the name ``loads``.
# ---------------------------------------------------------------------------


def loads(value: str) -> Any:
    return json.loads(value)


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(value: str) -> int:
    """Integers with SI (1k, 2.5M) or IEC (1Ki, 4Mi) suffixes."""
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{text}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def parse_cuda_graph_backend_arg(value: str) -> str:
    if value == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return value


def _cuda_graph_config_parser(facts: Facts) -> Callable[[str], dict[str, Any]]:
    phases = tuple(facts.cuda_graph_config_keys)

    def parse_cuda_graph_config_arg(value: str) -> dict[str, Any]:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
            )
        result: dict[str, Any] = {}
        for phase, settings in parsed.items():
            if phase not in phases:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config: unknown phase '{phase}', expected one of {phases}"
                )
            if not isinstance(settings, dict):
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(settings).__name__}"
                )
            if "backend" in settings:
                parse_cuda_graph_backend_arg(settings["backend"])
            allowed = facts.cuda_graph_config_keys[phase]
            for key in settings:
                if key not in allowed:
                    raise argparse.ArgumentTypeError(
                        f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {allowed}"
                    )
            result[phase] = dict(settings)
        return result

    return parse_cuda_graph_config_arg


def _converter(name: str | None, facts: Facts) -> Callable[[str], Any] | None:
    table: dict[str, Callable[[str], Any]] = {
        "str": str,
        "int": int,
        "float": float,
        "json": loads,
        "json_list": json_list_type,
        "human_readable_int": human_readable_int,
        "nullable_str": nullable_str,
        "cuda_graph_backend": parse_cuda_graph_backend_arg,
        "cuda_graph_config": _cuda_graph_config_parser(facts),
    }
    if name is None:
        return None
    return table.get(name, str)


# ---------------------------------------------------------------------------
# Non-standard actions of the real parser.
# ---------------------------------------------------------------------------


def _deprecation_warning(option: str | None, new_flag: str | None) -> None:
    use = f" Use '{new_flag}' instead." if new_flag else ""
    message = f"'{option}' is deprecated and will be removed in a future release.{use}"
    print(f"{_YELLOW}{message}{_RESET}", file=sys.stderr)


class _DeprecatedStore(argparse.Action):
    """A retired spelling that still stores a value (``stored``), warning and naming its successor."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new_flag: str | None = kwargs.pop("new_flag", None)
        super().__init__(option_strings, dest, **kwargs)

    def stored(self, values: Any) -> Any:
        return values

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _deprecation_warning(option_string, self.new_flag)
        setattr(namespace, self.dest, self.stored(values))


class DeprecatedStoreTrue(_DeprecatedStore):
    """A retired boolean that still stores True, with a warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("nargs", 0)
        super().__init__(option_strings, dest, **kwargs)

    def stored(self, values: Any) -> Any:
        return True


class DeprecatedStoreConst(_DeprecatedStore):
    """A retired flag whose use stores one fixed value on the new field."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.const_value: Any = kwargs.pop("const_value", None)
        super().__init__(option_strings, dest, **kwargs)

    def stored(self, values: Any) -> Any:
        return self.const_value


class DeprecatedAliasStore(_DeprecatedStore):
    """A deprecated spelling of another flag (0.5.17's ``DeprecatedAliasStoreAction``): stores, warns."""


class Deprecated(argparse.Action):
    """A flag that does nothing any more but warn (0.5.17's ``DeprecatedAction``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("nargs", 0)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        message = (
            f"The command line argument '{option_string}' is deprecated "
            "and will be removed in future versions."
        )
        print(f"{_YELLOW}{message}{_RESET}", file=sys.stderr)


class LoraPaths(argparse.Action):
    """``--lora-paths``: plain paths, or JSON objects with lora_name/lora_path."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        out: list[Any] = []
        for raw in values or []:
            item = str(raw).strip()
            if item.startswith("{") and item.endswith("}"):
                obj = json.loads(item)
                if "lora_path" not in obj or "lora_name" not in obj:
                    parser.error(
                        f"{item!r} looks like a JSON str, but it does not contain "
                        "'lora_name' and 'lora_path' keys."
                    )
                out.append(obj)
            else:
                out.append(item)
        setattr(namespace, self.dest, out)


# ---------------------------------------------------------------------------
# The parser.
# ---------------------------------------------------------------------------


def retired_flag_hints(argv: Sequence[str], facts: Facts) -> list[str]:
    """Explain flags an earlier SGLang accepted and this one does not."""
    hints: list[str] = []
    seen: set[str] = set()
    for token in argv:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        if name in seen:
            continue
        seen.add(name)
        version = facts.sglang_version
        if name in facts.renamed_flags:
            hints.append(f"{name} was removed in SGLang {version}; use {facts.renamed_flags[name]}")
        elif name in facts.removed_flags:
            hints.append(f"{name} was removed in SGLang {version} without a replacement")
    return hints


class SimulatorParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that adds hints for retired flags."""

    def __init__(self, facts: Facts) -> None:
        super().__init__(prog=PROG)
        self.facts = facts
        self._argv: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._argv, namespace)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        lines = [f"{self.prog}: error: {message}"]
        lines += [f"{self.prog}: error: {hint}" for hint in retired_flag_hints(self._argv, self.facts)]
        self.exit(2, "\n".join(lines) + "\n")


def _positive_forms(flag: Flag) -> list[str]:
    """BooleanOptionalAction generates the ``--no-`` form itself."""
    opts = set(flag.option_strings)
    return [o for o in flag.option_strings if not (o.startswith("--no-") and "--" + o[5:] in opts)]


def _add(parser: argparse.ArgumentParser, flag: Flag, facts: Facts) -> None:
    names = list(flag.option_strings)
    # argparse.SUPPRESS is recorded as its text; argparse compares it by identity.
    default = argparse.SUPPRESS if flag.default == argparse.SUPPRESS else flag.default
    common: dict[str, Any] = {"dest": flag.dest, "default": default}
    kind = flag.action
    if kind == "help":
        return
    if kind in ("store_true", "store_false"):
        parser.add_argument(*names, action=kind, **common)
    elif kind in ("store_const", "append_const"):
        parser.add_argument(*names, action=kind, const=flag.const, **common)
    elif kind == "count":
        parser.add_argument(*names, action="count", **common)
    elif kind == "boolean_optional":
        parser.add_argument(*_positive_forms(flag), action=argparse.BooleanOptionalAction, **common)
    elif kind == "deprecated_store_true":
        parser.add_argument(
            *names, action=DeprecatedStoreTrue, new_flag=flag.deprecated_use_instead, **common
        )
    elif kind == "deprecated_store_const":
        parser.add_argument(
            *names,
            action=DeprecatedStoreConst,
            new_flag=flag.deprecated_use_instead,
            const_value=flag.const,
            choices=flag.choices,
            nargs=flag.nargs,
            **common,
        )
    elif kind == "deprecated":
        parser.add_argument(*names, action=Deprecated, nargs=flag.nargs, **common)
    elif kind == "deprecated_alias_store":
        alias: dict[str, Any] = {"new_flag": flag.deprecated_use_instead}
        if flag.nargs is not None:
            alias["nargs"] = flag.nargs
        if flag.choices is not None:
            alias["choices"] = list(flag.choices)
        converter = _converter(flag.type, facts)
        if converter is not None:
            alias["type"] = converter
        parser.add_argument(*names, action=DeprecatedAliasStore, **common, **alias)
    elif kind == "lora_paths":
        parser.add_argument(*names, action=LoraPaths, nargs=flag.nargs, type=str, **common)
    else:  # store, append and plugin store subclasses
        extra: dict[str, Any] = {}
        if flag.nargs is not None:
            extra["nargs"] = flag.nargs
        if flag.const is not None:
            extra["const"] = flag.const
        if flag.choices is not None:
            extra["choices"] = list(flag.choices)
        if flag.required:
            extra["required"] = True
        converter = _converter(flag.type, facts)
        if converter is not None:
            extra["type"] = converter
        action = "append" if kind == "append" else "store"
        parser.add_argument(*names, action=action, **common, **extra)


def build_parser(facts: Facts | None = None) -> SimulatorParser:
    facts = facts or load_facts()
    parser = SimulatorParser(facts)
    for flag in facts.flags:
        _add(parser, flag, facts)
    return parser


def _config_value(text: str) -> str | bool:
    """A scalar of a flat YAML mapping: quotes removed, true/false as booleans, anything else as written."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def merge_config_file(argv: Sequence[str]) -> list[str]:
    """``--config file.yaml`` like SGLang 0.5.23: the file's options go first, the other arguments win.

    The simulator is stdlib-only, so it reads a flat mapping of scalars (``api-key: "..."``, ``port: 30000``,
    ``trust-remote-code: true``), which is what sglang-fleet writes; nested values and lists exit 2.
    """
    argv = list(argv)
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    if index == len(argv) - 1 or argv.count("--config") > 1:
        print(f"{PROG}: error: --config needs exactly one YAML file", file=sys.stderr)
        raise SystemExit(2)
    path = argv[index + 1]
    if not path.endswith((".yaml", ".yml")):
        print(f"{PROG}: error: Config file must be YAML format, got: {path}", file=sys.stderr)
        raise SystemExit(2)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as error:
        print(f"{PROG}: error: Config file not found: {path} ({error})", file=sys.stderr)
        raise SystemExit(2) from error
    options: list[str] = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, separator, raw = line.partition(":")
        if not separator or line[:1].isspace() or raw.strip() in ("", "|", ">") or raw.strip()[:1] in "[{-":
            print(
                f"{PROG}: error: the simulator reads a flat mapping of scalars from --config; "
                f"cannot read: {line!r}",
                file=sys.stderr,
            )
            raise SystemExit(2)
        value = _config_value(raw)
        if value is True:
            options.append(f"--{key.strip()}")
        elif value is not False:
            options += [f"--{key.strip()}", str(value)]
    return options + argv[:index] + argv[index + 2 :]


def parse_args(argv: Sequence[str], facts: Facts | None = None) -> dict[str, Any]:
    """Parse like ``prepare_server_args``; exits 2 on a bad command line."""
    namespace = build_parser(facts).parse_args(merge_config_file(argv))
    return dict(vars(namespace))
