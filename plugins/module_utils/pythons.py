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
    at once when made, read by answers() (the Python running this module answers for itself); close ends those unread."""

    def __init__(self, names: tuple[str, ...] = PYTHON_NAMES) -> None:
        import shutil
        import sys

        self.found: dict[str, str] = {}
        self.asked: dict[tuple[str, str], subprocess.Popen[str]] = {}  # (name, path): its answer
        for name in names:
            path = shutil.which(name)
            if not path:
                continue
            if sys.executable and os.path.realpath(path) == os.path.realpath(sys.executable):
                self.found[name] = self.found[path] = f"{sys.version_info.major}.{sys.version_info.minor}"
                continue
            try:
                self.asked[name, path] = started([path, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            except OSError:
                continue

    def answers(self) -> dict[str, str]:
        while self.asked:
            (name, path), call = self.asked.popitem()
            output = answered(call, 30)
            if output is not None and call.returncode == 0:
                self.found[name] = self.found[path] = output[0].strip()
        return self.found

    def close(self) -> None:
        while self.asked:
            stop(self.asked.popitem()[1])
