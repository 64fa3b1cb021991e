"""Logging in SGLang's style: ``[2025-01-01 12:00:00 TP0] message`` on stderr."""

from __future__ import annotations

import logging
import sys

_FORMAT = "[%(asctime)s%(rank)s] %(message)s"
_DATEFMT = "%Y-%m-%d %H:%M:%S"


class _RankFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "rank"):
            record.rank = ""
        return True


def level_from_name(name: str) -> int:
    """Resolve ``--log-level`` the way SGLang does: ``getattr(logging, NAME)``.

    Real SGLang does no validation, so an unknown name crashes with an
    AttributeError after parsing; the caller reports that and exits 1.
    """
    level = getattr(logging, name.upper(), None)
    if not isinstance(level, int):
        raise AttributeError(f"module 'logging' has no attribute '{name.upper()}'")
    return level


def setup(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt=_DATEFMT))
    handler.addFilter(_RankFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def main_logger() -> logging.LoggerAdapter[logging.Logger]:
    """The launcher / HTTP server process (no rank prefix)."""
    return logging.LoggerAdapter(logging.getLogger("sglang"), {"rank": ""})


def scheduler_logger(tp_size: int, rank: int = 0) -> logging.LoggerAdapter[logging.Logger]:
    """The scheduler of TP rank ``rank`` (prefix `` TP0`` only when tp > 1)."""
    prefix = f" TP{rank}" if tp_size > 1 else ""
    return logging.LoggerAdapter(logging.getLogger("sglang.scheduler"), {"rank": prefix})
