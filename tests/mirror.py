"""The test mirror for tests of the model download: olah, a Hugging Face-compatible server, serving the generated
model repository (tests/fixtures/model_repo.py) offline on 127.0.0.1, as scripts/model-mirror.sh starts it.

Plain functions; a test module wraps start_mirror() in a session fixture of its own.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/model-mirror.sh"
# The first start creates .mirror-venv/ (about a minute) and may install git-lfs.
START_TIMEOUT_S = 600


@dataclass(frozen=True)
class Mirror:
    """Where the mirror answers and what it serves: the repository id and its commits, oldest first (the first is
    tagged v1; the second changes one shard and generation_config.json)."""

    endpoint: str
    repo: str
    commits: tuple[str, ...]


def parse(output: str) -> Mirror:
    """The script's KEY=value lines (MODEL_MIRROR_ENDPOINT, MODEL_MIRROR_REPO, MODEL_MIRROR_COMMITS) as a Mirror."""
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("MODEL_MIRROR_"):
            values[key] = " ".join(shlex.split(value))
    missing = {"MODEL_MIRROR_ENDPOINT", "MODEL_MIRROR_REPO", "MODEL_MIRROR_COMMITS"} - values.keys()
    if missing:
        raise ValueError(f"{SCRIPT.name} did not print {', '.join(sorted(missing))}:\n{output}")
    return Mirror(values["MODEL_MIRROR_ENDPOINT"], values["MODEL_MIRROR_REPO"], tuple(values["MODEL_MIRROR_COMMITS"].split()))


def _run(action: str, timeout: float) -> str:
    done = subprocess.run([str(SCRIPT), action], capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} {action} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def start_mirror() -> Mirror:
    """Start the mirror (or find it running) and say where it answers. The port: MODEL_MIRROR_PORT (18090)."""
    return parse(_run("start", START_TIMEOUT_S))


def stop_mirror() -> None:
    _run("stop", 60)
