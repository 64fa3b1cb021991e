"""The Pythons on a host's PATH a venv could be built with, and their versions (module sglang_host_facts)."""

from __future__ import annotations

import os
import subprocess

from ansible_collections.sglang.fleet.plugins.module_utils.process_calls import answered, started, stop

# The Pythons a venv could be built with: SGLang's wheels exist for 3.11-3.13 (its pinned packages install on 3.11-3.12:
# plugins/filter/sglang_venv.py WHEEL_TAGS).
PYTHON_NAMES = ("python3", "python3.11", "python3.12", "python3.13")


class PythonVersions:
    """The version (major.minor) of each of `names` found on PATH, by its name and by its path, as it answers: all asked
    at once when made, read by answers() (the Python running this module answers for itself); close ends those unread.
    Each of `reported` (a name on PATH or a path: the Python a venv is built with) is asked too, and errors() says why
    one gave no version."""

    def __init__(self, names: tuple[str, ...] = PYTHON_NAMES, reported: tuple[str, ...] = ()) -> None:
        import shutil
        import sys

        self.reported = reported
        self.found: dict[str, str] = {}
        self.failed: dict[str, str] = {}  # name: why it gave no version
        self.asked: dict[tuple[str, str], subprocess.Popen[str]] = {}  # (name, path): its answer
        for name in dict.fromkeys((*names, *reported)):
            path = shutil.which(name)
            if not path:
                self.failed[name] = "not executable" if os.sep in name and os.path.exists(name) else "not found"
                continue
            if sys.executable and os.path.realpath(path) == os.path.realpath(sys.executable):
                self.found[name] = self.found[path] = f"{sys.version_info.major}.{sys.version_info.minor}"
                continue
            try:
                self.asked[name, path] = started([path, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            except OSError as error:
                self.failed[name] = str(error)

    def answers(self) -> dict[str, str]:
        while self.asked:
            (name, path), call = self.asked.popitem()
            output = answered(call, 30)
            if output is None:
                self.failed[name] = "no answer within 30 s"
            elif call.returncode != 0:
                self.failed[name] = (output[1].strip().splitlines() or [f"exit status {call.returncode}"])[-1]
            else:
                self.found[name] = self.found[path] = output[0].strip()
        return self.found

    def errors(self) -> dict[str, str]:
        """Why each of `reported` gave no version (reading the answers first)."""
        self.answers()
        return {name: self.failed.get(name, "not asked") for name in self.reported if name not in self.found}

    def close(self) -> None:
        while self.asked:
            stop(self.asked.popitem()[1])
