"""The control node's key for deploy's probe answered ahead (module_utils/probe_ahead.py).

32 random bytes, made once in a folder of this user's alone under ANSIBLE_HOME. A host gets it, for one call, as a
module option Ansible does not log, to sign the probe request it kept; the control node checks that signature against
its own request, so a host's answer is used only for that very request, and what a result shows (the signature) reveals
nothing of what was signed (the routers' keys among it) to whoever reads it without this key.
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
    """This control node's key, made on first use (the first of several workers making it at once wins); None where
    it cannot be kept privately (then no probe is answered ahead)."""
    folder = folder or Path(constants.ANSIBLE_HOME, "sglang.fleet")
    path = folder / "probe-key"
    if not disk_cache.private(folder):
        return None
    try:
        if not path.exists():
            descriptor, partial = tempfile.mkstemp(dir=folder)
            try:
                with os.fdopen(descriptor, "wb") as out:
                    out.write(secrets.token_bytes(SIZE))
                with contextlib.suppress(FileExistsError):
                    os.link(partial, path)
            finally:
                os.unlink(partial)
        made = path.read_bytes()
    except OSError:
        return None
    return made if len(made) == SIZE else None
