"""``POST /update_weights_from_disk``: what real SGLang 0.5.17 answers, pinned by
tests/recordings/sglang-0.5.17-h100-restarts/ (tests/contract/test_update_weights.py replays it).

* a directory whose shards are whole: 200 ``{"success": true, "message": "Succeeded to update model
  weights." [+ " Weight version updated to <v>."], "num_paused_requests": 0}``; ``/model_info`` then
  reports the new ``model_path`` and ``weight_version`` (also every ``/generate`` answer's
  ``meta_info``);
* a path that is not a directory: 400, the loader's message ("Failed to get weights iterator: Repo id
  must be in the form ..."), nothing changes;
* a shard whose header or data is cut short: no answer: the scheduler raises SafetensorError, its
  roll-back re-reads the same path and raises again, and the server kills its own process tree 5 s later.

Either way ``sglang:weight_load_duration_seconds{source="disk"}`` is set to the call's wall time. Other
failures (another architecture or other tensor shapes) were not recorded and are not imitated: the fleet
never asks for them.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

SUCCESS = "Succeeded to update model weights."
NOT_FOUND = (
    "Failed to get weights iterator: Repo id must be in the form 'repo_name' or "
    "'namespace/repo_name': '{path}'. Use `repo_type` argument if needed.."
)
TRUNCATED = "Error while deserializing header: incomplete metadata, file not fully covered"


@dataclass(frozen=True)
class Outcome:
    """`status` 200 or 400 with `message`, or `crash` (the server dies) with the SafetensorError text."""

    status: int
    message: str
    crash: bool = False


def shard_problem(path: Path) -> str | None:
    """Why safetensors cannot read this shard (its header or data cut short), or None when it is whole."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) < 8:
                return TRUNCATED
            (length,) = struct.unpack("<Q", raw)
            header = json.loads(handle.read(length))
    except (OSError, ValueError):
        return TRUNCATED
    tensors = [t for name, t in header.items() if name != "__metadata__" and isinstance(t, dict)]
    ends = [int(t["data_offsets"][1]) for t in tensors]
    return None if path.stat().st_size == 8 + length + max(ends, default=0) else TRUNCATED


def update_from_disk(model_path: str, weight_version: str | None) -> Outcome:
    """What real SGLang answers to one update request (see the module's docstring)."""
    directory = Path(model_path)
    if not directory.is_dir():
        return Outcome(400, NOT_FOUND.format(path=model_path))
    for shard in sorted(directory.glob("*.safetensors")):
        problem = shard_problem(shard)
        if problem:
            return Outcome(0, problem, crash=True)
    version = f" Weight version updated to {weight_version}." if weight_version is not None else ""
    message = SUCCESS + version
    return Outcome(200, message)
