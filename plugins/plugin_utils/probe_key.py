"""The control node's key for deploy's probe answered ahead (module_utils/probe_ahead.py).

32 random bytes, made once in a folder of this user's alone under ANSIBLE_HOME. The probe's action signs the request a
host keeps with it; each host gets it for the plan's call, as a module option Ansible does not log, and makes its kept
request only when that signature checks out; the action uses the answer only when it carries its own request's
signature. What a result shows (the signature) reveals nothing of what was signed (the routers' keys among it) to
whoever reads it without this key.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from ansible import constants
from ansible_collections.sglang.fleet.plugins.plugin_utils import disk_cache

SIZE = 32


def key(folder: Path | None = None) -> bytes | None:
    """This control node's key, made on first use (the first of several workers making it at once wins; one of another
    size, a crash's, is made again); None where it cannot be kept privately (then no probe is answered ahead)."""
    folder = folder or Path(constants.ANSIBLE_HOME, "sglang.fleet")
    path = folder / "probe-key"
    if not disk_cache.private(folder):
        return None
    try:
        with contextlib.suppress(FileNotFoundError):
            if len(made := path.read_bytes()) == SIZE:
                return made
        descriptor, partial = tempfile.mkstemp(dir=folder)
        try:
            with os.fdopen(descriptor, "wb") as out:
                out.write(secrets.token_bytes(SIZE))
                out.flush()
                os.fsync(out.fileno())
            if path.exists():
                os.replace(partial, path)  # one of another size
            else:
                with contextlib.suppress(FileExistsError):
                    os.link(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
        made = path.read_bytes()
    except OSError:
        return None
    return made if len(made) == SIZE else None
