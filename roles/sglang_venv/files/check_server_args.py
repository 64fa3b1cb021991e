"""Parse SGLang server command lines with the installed runtime's own parser, without starting a server.

Usage: python check_server_args.py sglang|simulator [VERSION] < {"instance name": ["--flag", "value", ...], ...}
Prints {"instance name": {"rc": 0|2|1, "error": "..."}}: rc 2 is the parser refusing the command line
(argparse), 1 any other failure. VERSION is the pinned SGLang version: the simulator parses as that release
(SGLANG_SIM_VERSION); a venv of SGLang itself is that release. Installed into the venv by sglang-fleet;
preflight runs it once per host.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def runtime_parser(runtime: str, version: str = "") -> Callable[[list[str]], Any]:
    if runtime == "sglang":
        from sglang.srt.plugins import load_plugins
        from sglang.srt.server_args import prepare_server_args

        load_plugins()
        sglang_parser: Callable[[list[str]], Any] = prepare_server_args
        return sglang_parser
    if version:
        os.environ["SGLANG_SIM_VERSION"] = version
    from sglang_simulator.args import parse_args

    return parse_args


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


def main() -> int:
    parse = runtime_parser(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
    command_lines = json.load(sys.stdin)
    print(json.dumps({name: check(parse, argv) for name, argv in command_lines.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
