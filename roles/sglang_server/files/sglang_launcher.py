"""Starts an SGLang server (or the simulator) with its API keys kept out of its log.

    python -I sglang_launcher.py MODULE [ARG ...]

runs MODULE (``sglang.launch_server``, ``sglang_simulator``) as ``__main__`` with ``sys.argv`` = [its file, ARG ...],
exactly as ``python -m MODULE ARG ...`` would, after installing a log record factory that replaces the value of every
``api_key`` / ``admin_api_key`` in a record's message (and traceback) with ``'<redacted>'``. SGLang logs its resolved
settings at start (``server_args={... 'api_key': '...'}``, in the launching process); systemd < 253 cannot filter that
line out of the journal (``LogFilterPatterns=``), so it must never be written. Child processes that SGLang spawns run
``MODULE`` again as ``__mp_main__`` without this filter: SGLang 0.5.23 logs its settings in the launching process only.

Installed by the fleet (role sglang_server) and run with the venv's ``python -I``; standard library only.
"""

from __future__ import annotations

import logging
import re
import runpy
import sys
from collections.abc import Callable
from typing import Any

REDACTED = "<redacted>"
# api_key='…' (a dataclass repr), 'api_key': '…' (a dict repr), "api_key": "…" (JSON), and the same for admin_api_key
# (or api-key); a value in either kind of quotes, with backslash escapes.
_KEYED = re.compile(r"""(\b(?:admin[-_])?api[-_]key['"]?\s*[=:]\s*)(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# --api-key VALUE / --admin-api-key=VALUE in a command line (SGLang's launch_command holds the --config file merged in).
_FLAG = re.compile(r"""(--(?:admin-)?api-key(?:=|\s+))[^\s'"]+""")


def redact(text: str) -> str:
    """The text with the value of every api_key / admin_api_key replaced by '<redacted>'."""
    text = _KEYED.sub(lambda match: f"{match.group(1)}'{REDACTED}'", text)
    return _FLAG.sub(lambda match: f"{match.group(1)}{REDACTED}", text)


def install(scrub: Callable[[str], str] = redact) -> None:
    """Every log record created from now on (any logger, any handler set up later) carries a scrubbed message."""
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it as it would have
            return record
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        raise SystemExit("usage: python -I sglang_launcher.py MODULE [ARG ...]")
    install()
    sys.argv = [args[0], *args[1:]]  # runpy puts the module's file in sys.argv[0], as python -m does
    runpy.run_module(args[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
