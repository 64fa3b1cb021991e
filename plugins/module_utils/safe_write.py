"""Writing a file as root where another account may have planted a link (issue 38).

A module run as root that writes `<path>.tmp` with open(), chmod() and replace() follows a link another account put
at either name: the account that owns the directory (the service home) picks what root overwrites. Every root write
of the collection goes through write_file: a fresh file made by mkstemp in the target's directory (O_CREAT|O_EXCL|
O_NOFOLLOW: never an existing file or link), owner and mode set on its descriptor, synced, then renamed over the
target (a rename replaces a link, it never follows one); a target that is a link is refused outright.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile


class LinkRefused(OSError):
    """The path to write is a symbolic link (someone planted it): nothing is written."""


def refuse_link(path: str) -> None:
    """Raises LinkRefused when `path` is a symbolic link."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(status.st_mode):
        raise LinkRefused(errno.ELOOP, f"{path} is a symbolic link ({os.readlink(path)}): refusing to write through it")


def write_file(path: str, data: bytes, mode: int, uid: int = -1, gid: int = -1) -> None:
    """Replaces `path` with `data` atomically (readers see the old or the new content), owned by uid:gid (-1: this
    process's) with `mode`; never writes through a link at `path` or at a temporary name."""
    refuse_link(path)
    directory = os.path.dirname(path) or "."
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        if uid != -1 or gid != -1:
            os.fchown(descriptor, uid, gid)
        os.fchmod(descriptor, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
        os.close(descriptor)
        descriptor = -1
        refuse_link(path)
        os.replace(temporary, path)
    except BaseException:
        if descriptor != -1:
            os.close(descriptor)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    sync_directory(directory)


def copy_file(source: str, target: str) -> None:
    """Copies `source` to `target` with its owner and mode (write_file's way); a link at either is refused."""
    descriptor = open_no_follow(source)
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        data = handle.read()
    write_file(target, data, stat.S_IMODE(status.st_mode), status.st_uid, status.st_gid)


def open_no_follow(path: str) -> int:
    """A read-only descriptor of `path`; LinkRefused when it is a symbolic link."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkRefused(errno.ELOOP, f"{path} is a symbolic link: refusing to read through it") from error
        raise


def set_attributes(path: str, mode: int, uid: int = -1, gid: int = -1) -> None:
    """Sets an existing regular file's owner and mode through its descriptor, never through a link at `path`."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkRefused(errno.ELOOP, f"{path} is a symbolic link: refusing to change it") from error
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if uid != -1 or gid != -1:
            os.fchown(descriptor, uid, gid)
        os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)


def sync_directory(directory: str) -> None:
    """Makes a rename in `directory` durable (best effort: a file system may not sync directories)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def read_file(path: str) -> bytes | None:
    """The file's bytes without following a link at `path` (None when it is missing); LinkRefused for a link."""
    try:
        descriptor = open_no_follow(path)
    except FileNotFoundError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read()
