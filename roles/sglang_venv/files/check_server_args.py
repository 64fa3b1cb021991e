"""Parse SGLang server command lines with the installed runtime's own parser, without starting a server.

Usage: python check_server_args.py PARSER [SETUP ...] < {"instance name": COMMAND LINE, ...}
PARSER is the runtime's parser as MODULE:FUNCTION, called with the argv (SGLang's is
sglang.srt.server_args:prepare_server_args); each SETUP (MODULE:FUNCTION) is called first without arguments, as the
runtime's own launcher does (SGLang's loads its plugins). The runtime reads its settings from the environment the
servers get (the caller passes it), so it parses as the release the servers run.
COMMAND LINE is the argv list the unit runs, or {"argv": [...], "stand_in_config": PATH | null,
"stand_in_files": [PATH, ...]}: SGLang reads its --config file while parsing, and the unit's (the API key file,
"api-key: ...") may not exist yet on a first deploy, so a private temporary file of the same shape (an api-key and a
placeholder) is parsed in its place; the key itself is never read. Each of "stand_in_files" (the TLS certificate and
key, whose existence SGLang checks while parsing) is parsed as an empty private temporary file, for the same reason.
Prints {"instance name": {"rc": 0|2|1, "error": "..."}}: rc 2 is the parser refusing the command line
(argparse), 1 any other failure. Installed into the venv by sglang-fleet; preflight runs it once per host.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any


def entry_point(name: str) -> Callable[..., Any]:
    """MODULE:FUNCTION, imported."""
    module, _colon, function = name.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found


def runtime_parser(parser: str, setup: Sequence[str] = ()) -> Callable[[list[str]], Any]:
    """The runtime's parser, after the setup its launcher runs before parsing."""
    for name in setup:
        entry_point(name)()
    return entry_point(parser)


def check(parse: Callable[[list[str]], Any], argv: list[str]) -> dict[str, Any]:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parse(argv)
    except SystemExit as exit_:
        return {"rc": exit_.code if isinstance(exit_.code, int) else 1, "error": errors.getvalue()}
    except Exception as error:
        return {"rc": 1, "error": f"{errors.getvalue()}{type(error).__name__}: {error}"}
    return {"rc": 0, "error": ""}


STAND_IN = "api-key: preflight-stand-in\n"


def with_stand_in(command_line: Any, directory: str) -> list[str]:
    """The argv to parse: the unit's, its API key file replaced by a stand-in of the same shape."""
    if isinstance(command_line, list):
        return [str(word) for word in command_line]
    argv = [str(word) for word in command_line["argv"]]
    config = command_line.get("stand_in_config")
    if config:
        stand_in = os.path.join(directory, "stand-in-" + os.path.basename(str(config)))
        with open(stand_in, "w", encoding="utf-8") as handle:
            handle.write(STAND_IN)
        argv = [
            stand_in if word == config and index and argv[index - 1] == "--config" else word for index, word in enumerate(argv)
        ]
    for number, path in enumerate(command_line.get("stand_in_files") or []):
        stand_in = os.path.join(directory, f"stand-in-{number}-" + os.path.basename(str(path)))
        with open(stand_in, "w", encoding="utf-8"):
            pass
        argv = [stand_in if word == str(path) else word for word in argv]
    return argv


def main() -> int:
    parse = runtime_parser(sys.argv[1], sys.argv[2:])
    command_lines = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="sglang-fleet-args-") as directory:
        verdicts = {name: check(parse, with_stand_in(line, directory)) for name, line in command_lines.items()}
    print(json.dumps(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
