"""Whether a file on the host differs from what a role would write: content, owner, group or mode.

The one comparison behind module sglang_instance_files, deploy's probe (in check mode) and its writes alike.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from ansible_collections.sglang.fleet.plugins.module_utils import safe_write


@dataclass(frozen=True)
class FileComparison:
    """A file on the host against its spec: its content now (None where there is no file), whether the content and
    the attributes differ, and the spec's owner's uid and group's gid (None where either account does not exist yet,
    as in a check-mode run before the role creates it)."""

    current: bytes | None
    content_differs: bool
    attributes_differ: bool
    ids: tuple[int, int] | None

    @property
    def differs(self) -> bool:
        return self.content_differs or self.attributes_differ


def account_ids(owner: str, group: str) -> tuple[int, int] | None:
    """The uid of `owner` and the gid of `group`; None when either does not exist."""
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def compare_file(path: str, data: bytes, owner: str, group: str, mode: int) -> FileComparison:
    """`path` on the host against `data` owned by `owner`:`group` with permission bits `mode`. A missing file differs
    in content only; an existing one whose owner or group does not exist yet differs in its attributes. A link at
    `path` is refused (safe_write.LinkRefused): root never reads or writes through it."""
    current = safe_write.read_file(path)
    ids = account_ids(owner, group)
    attributes_differ = False
    if current is not None:
        status = os.lstat(path)
        attributes_differ = ids is None or (status.st_uid, status.st_gid, status.st_mode & 0o7777) != (*ids, mode)
    return FileComparison(current, current != data, attributes_differ, ids)
