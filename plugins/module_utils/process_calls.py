"""Commands a module starts, to run while it does its other work, and reads (or ends) later, each with a deadline of
its own.

AnsibleModule.run_command runs one command at a time and has no timeout: the host facts start their nvidia-smi calls
and their Pythons' version asks at once and read each when its answer is needed, ending a call that outlives its
deadline with whatever it started; the CUDA smoke check starts one check per instance and gives each a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    Call = subprocess.Popen[str]  # a started command (annotations only: subscripted at run time from Python 3.9 on)


def started(argv: list[str]) -> subprocess.Popen[str]:
    """`argv` running in a session of its own (ended with whatever it starts: stop), its output piped (as UTF-8 text, a
    byte that is not read as U+FFFD, not an error)."""
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace", start_new_session=True
    )


def piped(argv: list[str]) -> subprocess.Popen[str]:
    """`argv` running with no input, its output and errors piped together."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)


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
