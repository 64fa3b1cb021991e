"""Commands a module starts, to run while it does its other work, and reads (or ends) later."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def started(argv: list[str]) -> subprocess.Popen[str]:
    """`argv` running in a session of its own (ended with whatever it starts: stop), its output piped."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def stop(call: subprocess.Popen[str]) -> None:
    """Kill `call` and what it started, and reap it; pipes something outside its session still holds are closed, not
    read."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(call.pid, signal.SIGKILL)
    try:
        call.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        for pipe in (call.stdout, call.stderr):
            if pipe is not None:
                pipe.close()
        call.wait()


def answered(call: subprocess.Popen[str], timeout: float) -> tuple[str, str] | None:
    """(stdout, stderr) of `call` once it exits within `timeout` seconds; else None, `call` and what it started stopped."""
    try:
        return call.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(call)
        return None
