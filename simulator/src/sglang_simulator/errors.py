"""Errors the simulator reports the way SGLang would, then exits 1."""

from __future__ import annotations


class StartupError(RuntimeError):
    """A startup failure real SGLang 0.5.23 would also hit.

    ``str(error)`` is the line SGLang ends with (usually ``ExceptionType:
    message``); ``details`` are extra lines the simulator adds to explain it.
    """

    def __init__(self, message: str, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.details = details
