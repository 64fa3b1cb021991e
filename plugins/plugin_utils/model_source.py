"""Model weights as part of the deploy, on the control node: a model source, its lock entry and a verified local cache.

A model source is data, one of:

- a Hub repository at a pinned commit: {repo: org/name, revision: <40-hex commit>, allow_patterns, ignore_patterns};
- a directory on the control node (air-gapped sites): {src: /abs/dir, name, revision: <a label>, allow_patterns,
  ignore_patterns}.

The patterns (optional) select files as huggingface_hub's `filter_repo_objects` does (fnmatch, `dir/` = `dir/*`).
The lock file (YAML in the inventory, written by playbooks/model_lock.yml; plugin_utils/model_lock.py) records every
selected file's size and SHA-256 under the source's key. `fetch` brings exactly those files into a content-addressed
cache on the control node, checks each against the lock, and lays out a snapshot directory of relative symlinks that
the deploy distributes.

Used by the action plugins sglang_model_lock and sglang_model_fetch; never on a managed host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO, TypedDict

from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import sha256_of
from ansible_collections.sglang.fleet.plugins.plugin_utils.model_lock import (
    LOCK_PLAYBOOK,
    ModelSourceError,
    lock_problems,
    write_atomically,
)

if TYPE_CHECKING:
    from huggingface_hub.hf_api import RepoFile

HUB_KEYS = ("repo", "revision", "allow_patterns", "ignore_patterns")
LOCAL_KEYS = ("src", "name", "revision", "allow_patterns", "ignore_patterns")
COMMIT = re.compile(r"[0-9a-f]{40}")
HUB_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
# A local name or label becomes a directory name: no separators, no dot-only names.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][\w.+-]*")
BLOCK = 1 << 20
DIFFERS_FROM_LOCK = f"the source's file differs from the lock file: update the lock ({LOCK_PLAYBOOK}) if the change is intended"


# The arguments both action plugins take (sglang_model_lock; sglang_model_fetch adds its cache_dir).
ARGUMENT_SPEC: dict[str, Any] = {
    "source": {"type": "dict", "required": True},
    "lock_file": {"type": "path", "required": True},
    "endpoint": {"type": "str", "default": ""},
    "token": {"type": "str", "default": "", "no_log": True},
}


def validated_arguments(action: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """An action plugin's arguments checked against `spec`. A failure says what is wrong, without the task's arguments
    Ansible's own message would show (the token)."""
    from ansible.errors import AnsibleActionFail

    try:
        _validated, args = action.validate_argument_spec(argument_spec=spec)
    except AnsibleActionFail as error:
        raise AnsibleActionFail(error.message) from None
    return dict(args)


class LockedFile(TypedDict):
    """One file of a lock entry."""

    size: int
    sha256: str


Files = dict[str, LockedFile]


GIB = 1024**3
# The key of a fetch's problem that is the cache's (no room for the files to fetch), not one file's.
CACHE_ROOM = "cache"


@dataclasses.dataclass
class FetchResult:
    """What `fetch` did: the snapshot directory, the files fetched (and their bytes), the files whose cached blob was
    reused, those of them hashed again to trust it, and a problem per file that could not be brought to the lock."""

    snapshot: str
    fetched: list[str] = dataclasses.field(default_factory=list)
    fetched_bytes: int = 0
    reused: list[str] = dataclasses.field(default_factory=list)
    hashed: list[str] = dataclasses.field(default_factory=list)
    problems: dict[str, str] = dataclasses.field(default_factory=dict)


# Model sources


def is_hub(source: Mapping[str, Any]) -> bool:
    """Whether the source is a Hub repository (else a directory on the control node)."""
    return "repo" in source


def source_key(source: Mapping[str, Any]) -> str:
    """The source's key in the lock file: org/name@commit, or name@label."""
    return f"{source['repo'] if is_hub(source) else source['name']}@{source['revision']}"


def slug(source: Mapping[str, Any]) -> str:
    """The source's directory name in the cache: org--name (as the Hub's own cache names it), or name."""
    return str(source["repo"]).replace("/", "--") if is_hub(source) else str(source["name"])


def _pattern_problems(source: Mapping[str, Any]) -> list[str]:
    problems = []
    for key in ("allow_patterns", "ignore_patterns"):
        value = source.get(key)
        if value is None or isinstance(value, str):
            continue
        if not isinstance(value, list) or not all(isinstance(pattern, str) for pattern in value):
            problems.append(f"{key} is not a list of patterns: {value!r}")
    return problems


def _hub_problems(source: Mapping[str, Any], pinned: bool) -> list[str]:
    problems = []
    repo, revision = source.get("repo"), source.get("revision")
    if not isinstance(repo, str) or not HUB_REPO.fullmatch(repo):
        problems.append(f"repo {repo!r} is not a Hub repository id of the form org/name")
    if revision is None:
        problems.append(f"revision is missing: pin the commit ({LOCK_PLAYBOOK} records it)")
    elif pinned and not (isinstance(revision, str) and COMMIT.fullmatch(revision)):
        problems.append(f"revision {revision!r} is not a commit: pin the commit ({LOCK_PLAYBOOK} records it)")
    return problems


def _local_problems(source: Mapping[str, Any]) -> list[str]:
    problems = []
    src = source.get("src")
    if not isinstance(src, str) or not os.path.isabs(src):
        problems.append(f"src {src!r} is not an absolute path (a directory on the control node)")
    for key in ("name", "revision"):
        value = source.get(key)
        if value is None:
            problems.append(f"{key} is missing: a directory source names its model and labels its revision")
        elif not isinstance(value, str) or not PLAIN_NAME.fullmatch(value):
            problems.append(f"{key} {value!r} is not a plain name (letters, digits, '.', '_', '+', '-'): it names a folder")
    return problems


def source_problems(source: Any, *, pinned: bool = True) -> list[str]:
    """What is wrong with a model source, one line each; empty when it can be locked and fetched. `pinned=False`
    accepts a Hub branch or tag for the revision (the lock playbook resolves it to its commit)."""
    if not isinstance(source, Mapping):
        return [f"the model source is not a mapping: {source!r}"]
    if "repo" in source and "src" in source:
        return ["the model source has both repo (a Hub repository) and src (a directory on the control node): give one"]
    if "repo" not in source and "src" not in source:
        return ["the model source has neither repo (a Hub repository, org/name) nor src (a directory on the control node)"]
    kind, allowed = ("Hub", HUB_KEYS) if is_hub(source) else ("directory", LOCAL_KEYS)
    unknown = sorted(str(key) for key in source if key not in allowed)
    problems = [f"unknown keys {', '.join(unknown)}: a {kind} source takes {', '.join(allowed)}"] if unknown else []
    problems += _hub_problems(source, pinned) if is_hub(source) else _local_problems(source)
    return problems + _pattern_problems(source)


def is_commit(revision: Any) -> bool:
    return isinstance(revision, str) and bool(COMMIT.fullmatch(revision))


def select(names: Iterable[str], source: Mapping[str, Any]) -> list[str]:
    """The names the source's allow_patterns and ignore_patterns select, as huggingface_hub selects them."""
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # exported lazily

    return sorted(
        filter_repo_objects(names, allow_patterns=source.get("allow_patterns"), ignore_patterns=source.get("ignore_patterns"))
    )


# Reading a source's files


def hub_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a Hub call raises for an expected failure: HTTP status, network, a bad id, a missing file."""
    import httpx2  # huggingface_hub's HTTP client: a connection refused or a timeout is one of its errors
    from huggingface_hub import errors

    return (ModelSourceError, OSError, ValueError, httpx2.HTTPError, errors.EntryNotFoundError, errors.XetDownloadError)


def _cause(error: BaseException) -> BaseException | None:
    return error.__cause__ or (None if error.__suppress_context__ else error.__context__)


def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _transport_error(error: BaseException) -> BaseException | None:
    """The error, or the first of its causes, that says the server did not answer (httpx2's TransportError)."""
    import httpx2  # huggingface_hub's HTTP client

    found: BaseException | None = error
    while found is not None and not isinstance(found, httpx2.TransportError):
        found = _cause(found)
    return found


def did_not_answer(error: BaseException) -> bool:
    """Whether the server did not answer at all (a refused connection, a timeout, a name that does not resolve): an
    error about the source, not about one file."""
    return _transport_error(error) is not None


def error_message(error: BaseException) -> str:
    """An exception as one line, its class and its message; with the network error under it in parentheses
    (huggingface_hub wraps a refused connection in a message that does not say so)."""
    text = _one_line(error)
    transport = _transport_error(error)
    if transport is not None and _one_line(transport) not in text:
        text += f" ({_one_line(transport)})"
    return text


def hide_progress_bars() -> None:
    """Turns off huggingface_hub's progress bars in this process: an Ansible worker reports through its result."""
    from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]  # exported lazily

    disable_progress_bars()


def _api(endpoint: str, token: str) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint or None, token=token or None)


def resolve_revision(source: Mapping[str, Any], endpoint: str = "", token: str = "") -> str:
    """The commit a Hub source's revision (a branch, tag or commit) names on the server."""
    if is_commit(source["revision"]):
        return str(source["revision"])
    try:
        info = _api(endpoint, token).repo_info(source["repo"], revision=source["revision"])
    except hub_errors() as error:
        raise ModelSourceError(f"{source['repo']}@{source['revision']}: {error_message(error)}") from error
    return str(info.sha)


def _hub_tree(source: Mapping[str, Any], endpoint: str, token: str) -> dict[str, RepoFile]:
    from huggingface_hub.hf_api import RepoFile

    tree = _api(endpoint, token).list_repo_tree(source["repo"], revision=source["revision"], recursive=True)
    found = {entry.path: entry for entry in tree if isinstance(entry, RepoFile)}
    return {name: found[name] for name in select(found, source)}


def download(source: Mapping[str, Any], name: str, directory: str, endpoint: str, token: str) -> str:
    """Downloads one file of a Hub source at its commit into `directory`; its path."""
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(
        source["repo"],
        name,
        revision=source["revision"],
        endpoint=endpoint or None,
        token=token or None,
        local_dir=directory,
    )
    if not isinstance(path, str):
        raise ModelSourceError(f"{name}: the download returned no file: {path!r}")
    return path


def _hub_files(source: Mapping[str, Any], endpoint: str, token: str) -> Files:
    try:
        tree = _hub_tree(source, endpoint, token)
        files: Files = {}
        with tempfile.TemporaryDirectory(prefix="sglang-model-lock-") as directory:
            for name, entry in tree.items():
                if entry.lfs is not None:
                    files[name] = {"size": int(entry.size), "sha256": str(entry.lfs.sha256)}
                else:
                    path = download(source, name, directory, endpoint, token)
                    files[name] = {"size": os.path.getsize(path), "sha256": sha256_of(path)}
    except hub_errors() as error:
        raise ModelSourceError(f"{source_key(source)}: {error_message(error)}") from error
    return files


# What upload_folder leaves out of a directory: git's and huggingface_hub's own bookkeeping.
LOCAL_IGNORED = [
    *(".git", ".git/*", "*/.git", "**/.git/**"),
    *(".cache/huggingface", ".cache/huggingface/*", "*/.cache/huggingface", "**/.cache/huggingface/**"),
]


def local_names(src: str) -> list[str]:
    """Every file under `src` (symlinks followed), as slash-separated paths relative to it, git's and the Hub
    client's bookkeeping left out. A name whose real path leaves `src` is listed too: _local_files refuses it."""
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # exported lazily

    names, seen = [], set()
    for directory, folders, entries in os.walk(src, followlinks=True):
        status = os.stat(directory)
        if (status.st_dev, status.st_ino) in seen:  # a symlink loop
            folders.clear()
            continue
        seen.add((status.st_dev, status.st_ino))
        for entry in entries:
            path = os.path.join(directory, entry)
            if os.path.isfile(path):
                names.append(os.path.relpath(path, src).replace(os.sep, "/"))
    return sorted(filter_repo_objects(names, ignore_patterns=LOCAL_IGNORED))


def local_path(src: str, name: str) -> str:
    """The real path of a directory source's file `name`; ModelSourceError when it leaves `src` (a link out of it, to
    a key in the user's home, would be locked, fetched and sent to every host)."""
    root = os.path.realpath(src)
    real = os.path.realpath(os.path.join(src, name))
    if os.path.commonpath([root, real]) != root:
        raise ModelSourceError(
            f"{name}: its real path {real} is outside src {src} (a link out of the source): refused, it is never read "
            "or sent; fix: copy the file into src, or point src at the directory that holds it"
        )
    return real


def _local_files(source: Mapping[str, Any]) -> Files:
    src = str(source["src"])
    if not os.path.isdir(src):
        raise ModelSourceError(f"{source_key(source)}: src {src} is not a directory on the control node")
    names = select(local_names(src), source)
    outside = []
    for name in names:
        try:
            local_path(src, name)
        except ModelSourceError as error:
            outside.append(str(error))
    if outside:
        raise ModelSourceError(f"{source_key(source)}: " + "; ".join(outside))
    try:
        return {
            name: {"size": os.path.getsize(local_path(src, name)), "sha256": sha256_of(local_path(src, name))} for name in names
        }
    except OSError as error:
        raise ModelSourceError(f"{source_key(source)}: {error_message(error)}") from error


def remote_files(source: Mapping[str, Any], endpoint: str = "", token: str = "") -> Files:
    """The source's selected files, name -> {size, sha256}: for a Hub repository from its tree at the commit (an LFS
    file's SHA-256 as the server records it, a small file's by downloading it), for a directory by reading it.
    Raises ModelSourceError for an expected failure (network, HTTP status, a missing directory)."""
    return _hub_files(source, endpoint, token) if is_hub(source) else _local_files(source)


# The cache: blobs/<sha256>, verified.json, snapshots/<slug>/<revision>/<name> -> ../../../blobs/<sha256>


@contextlib.contextmanager
def cache_lock(cache_dir: str) -> Iterator[None]:
    """Holds the cache for this process: another ansible-playbook sharing it waits."""
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _identity(status: os.stat_result) -> dict[str, int]:
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns, "inode": status.st_ino}


class Memo:
    """The blobs verified by an earlier run, sha256 -> {size, mtime_ns, inode} (cache_dir/verified.json): a blob whose
    identity still matches is trusted without reading it again."""

    def __init__(self, cache_dir: str) -> None:
        self.path = os.path.join(cache_dir, "verified.json")
        try:
            with open(self.path, encoding="utf-8") as handle:
                found = json.load(handle)
        except (OSError, ValueError):
            found = {}
        self.entries: dict[str, Any] = found if isinstance(found, dict) else {}

    def trusts(self, sha256: str, status: os.stat_result) -> bool:
        return bool(self.entries.get(sha256) == _identity(status))

    def remember(self, sha256: str, path: str) -> None:
        self.entries[sha256] = _identity(os.stat(path))

    def forget(self, sha256: str) -> None:
        self.entries.pop(sha256, None)

    def save(self) -> None:
        write_atomically(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")


def difference(name: str, expected: Mapping[str, Any], size: int, sha256: str) -> str:
    """The problem of a file whose content is not the locked one."""
    return (
        f"{name}: {size} bytes with SHA-256 {sha256}, the lock has {expected['size']} bytes with SHA-256 "
        f"{expected['sha256']}: {DIFFERS_FROM_LOCK}"
    )


def _cached_blob_is_good(blob: str, sha256: str, size: int, memo: Memo) -> bool | None:
    """Whether the blob is the locked content: None when it was trusted from the memo, True when it was hashed again
    and matches, False when it is missing or was wrong (then it is deleted)."""
    try:
        status = os.stat(blob)
    except FileNotFoundError:
        return False
    if status.st_size == size and memo.trusts(sha256, status):
        return None
    if status.st_size == size and sha256_of(blob) == sha256:
        memo.remember(sha256, blob)
        return True
    memo.forget(sha256)
    os.unlink(blob)
    return False


def _copy_hashing(source: BinaryIO, target: BinaryIO) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: source.read(BLOCK), b""):
        digest.update(block)
        target.write(block)
    return digest.hexdigest()


def _obtain_local(source: Mapping[str, Any], name: str, work: str) -> tuple[str, str]:
    """Copies a directory source's file into the work directory, hashing while copying: (path, sha256)."""
    origin_path = local_path(str(source["src"]), name)  # refused when it left src since it was locked
    handle, path = tempfile.mkstemp(dir=work)
    with open(origin_path, "rb") as origin, os.fdopen(handle, "wb") as copy:
        return path, _copy_hashing(origin, copy)


def _obtain_hub(source: Mapping[str, Any], name: str, work: str, endpoint: str, token: str) -> tuple[str, str]:
    """Downloads a Hub source's file into its own directory under the work directory: (path, sha256)."""
    path = download(source, name, tempfile.mkdtemp(dir=work), endpoint, token)
    return path, sha256_of(path)


Obtain = Callable[[str, str], tuple[str, str]]


def _fetch_one(name: str, expected: LockedFile, blob: str, obtain: Obtain, work: str, memo: Memo) -> str | None:
    """Brings one file into its blob; the problem, or None when the blob now holds the locked content. Raises what
    `obtain` raises (hub_errors() for an expected failure)."""
    path, sha256 = obtain(name, work)
    size = os.path.getsize(path)
    if (size, sha256) != (expected["size"], expected["sha256"]):
        os.unlink(path)
        return difference(name, expected, size, sha256)
    os.chmod(path, 0o444)  # written once; a snapshot's symlink must not be a way to edit it
    os.replace(path, blob)
    memo.remember(sha256, blob)
    return None


def _obtainer(source: Mapping[str, Any], endpoint: str, token: str) -> Obtain:
    if is_hub(source):
        return lambda name, work: _obtain_hub(source, name, work, endpoint, token)
    return lambda name, work: _obtain_local(source, name, work)


class _BlobFiller:
    """One fetch's pass over the locked files, under the cache's lock: each file's blob reused, or fetched and checked."""

    def __init__(self, source: Mapping[str, Any], cache_dir: str, endpoint: str, token: str) -> None:
        self.result = FetchResult(snapshot=snapshot_path(source, cache_dir))
        self.blobs, self.work = os.path.join(cache_dir, "blobs"), os.path.join(cache_dir, "work")
        self.memo, self.obtain = Memo(cache_dir), _obtainer(source, endpoint, token)
        # Once the server did not answer (after huggingface_hub's retries), the other files are not tried.
        self.unanswered = ""

    def reuse(self, name: str, expected: LockedFile) -> bool:
        """Whether the file's blob is in the cache with the locked content (noted as reused)."""
        blob = os.path.join(self.blobs, expected["sha256"])
        cached = _cached_blob_is_good(blob, expected["sha256"], expected["size"], self.memo)
        if cached is False:
            return False
        self.result.reused.append(name)
        self.result.hashed += [name] if cached else []
        return True

    def bring(self, name: str, expected: LockedFile) -> None:
        """Fetches the file into its blob, noting it as fetched, or its problem."""
        if self.unanswered:
            self.result.problems[name] = f"{name}: not fetched: the source did not answer for an earlier file ({self.unanswered})"
            return
        try:
            problem = _fetch_one(name, expected, os.path.join(self.blobs, expected["sha256"]), self.obtain, self.work, self.memo)
        except hub_errors() as error:
            problem = f"{name}: not fetched: {error_message(error)}"
            self.unanswered = error_message(error) if did_not_answer(error) else ""
        if problem:
            self.result.problems[name] = problem
        else:
            self.result.fetched.append(name)
            self.result.fetched_bytes += expected["size"]


def room_problem(cache_dir: str, to_fetch: Files) -> str:
    """What keeps the files to fetch out of the cache's filesystem, or "" when they fit."""
    needed = sum(entry["size"] for entry in to_fetch.values())
    free = shutil.disk_usage(cache_dir).free
    if needed <= free:
        return ""
    return (
        f"{len(to_fetch)} file(s) to fetch need {needed / GIB:.1f} GiB in {cache_dir} and its filesystem has "
        f"{free / GIB:.1f} GiB free: nothing was fetched"
    )


def _fill_blobs(source: Mapping[str, Any], files: Files, cache_dir: str, endpoint: str, token: str) -> FetchResult:
    filler = _BlobFiller(source, cache_dir, endpoint, token)
    shutil.rmtree(filler.work, ignore_errors=True)  # a killed run's partial downloads: nobody else holds the cache
    os.makedirs(filler.blobs, exist_ok=True)
    os.makedirs(filler.work)
    try:
        to_fetch = {name: expected for name, expected in sorted(files.items()) if not filler.reuse(name, expected)}
        no_room = room_problem(cache_dir, to_fetch)
        if no_room:
            filler.result.problems[CACHE_ROOM] = no_room
            to_fetch = {}
        if to_fetch and is_hub(source):  # only then: importing huggingface_hub's progress bars costs ~50 ms (asyncio)
            hide_progress_bars()
        for name, expected in to_fetch.items():
            filler.bring(name, expected)
    finally:
        filler.memo.save()
        shutil.rmtree(filler.work, ignore_errors=True)
    return filler.result


def snapshot_path(source: Mapping[str, Any], cache_dir: str) -> str:
    return os.path.join(cache_dir, "snapshots", slug(source), str(source["revision"]))


def _links(directory: str) -> dict[str, str] | None:
    """name -> link target of every entry under `directory`; None when it holds anything but symlinks and folders."""
    found = {}
    for parent, folders, entries in os.walk(directory):
        for entry in entries + [folder for folder in folders if os.path.islink(os.path.join(parent, folder))]:
            path = os.path.join(parent, entry)
            if not os.path.islink(path):
                return None
            found[os.path.relpath(path, directory).replace(os.sep, "/")] = os.readlink(path)
    return found


def _build_snapshot(snapshot: str, targets: Mapping[str, str]) -> None:
    """Lays out the snapshot as `targets` (name -> blob path) in relative symlinks, unless it already is exactly that;
    a rebuild happens in a sibling folder, swapped in by renames (the old one removed after)."""
    wanted = {name: os.path.relpath(targets[name], os.path.dirname(os.path.join(snapshot, name))) for name in targets}
    if os.path.isdir(snapshot) and _links(snapshot) == wanted:
        return
    parent = os.path.dirname(snapshot)
    os.makedirs(parent, exist_ok=True)
    building = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(snapshot)}.")
    for name, target in wanted.items():
        link = os.path.join(building, name)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(target, link)
    os.chmod(building, 0o755)
    old = None
    if os.path.lexists(snapshot):
        old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(snapshot)}.old.")
        os.replace(snapshot, os.path.join(old, "snapshot"))
    os.replace(building, snapshot)
    if old:
        shutil.rmtree(old)


def fetch(
    source: Mapping[str, Any], files: Mapping[str, Any], cache_dir: str, endpoint: str = "", token: str = ""
) -> FetchResult:
    """Brings the locked `files` of the source into the cache and lays out its snapshot, cache_dir/snapshots/<slug>/
    <revision>, of relative symlinks to the blobs. A cached blob is reused when its size matches the lock and its
    size, modification time and inode match what verified.json recorded when it was verified (it is hashed again
    otherwise; a wrong one is deleted and fetched again). Each file fetched is checked against the lock before it
    becomes a blob. A file that cannot be brought to the lock gets a problem, never an exception; it is left out of
    the snapshot."""
    bad = lock_problems(files)
    good: Files = {name: {"size": int(e["size"]), "sha256": str(e["sha256"])} for name, e in files.items() if name not in bad}
    with cache_lock(cache_dir):
        result = _fill_blobs(source, good, cache_dir, endpoint, token)
        result.problems.update(bad)
        present = set(result.fetched) | set(result.reused)
        _build_snapshot(result.snapshot, {name: os.path.join(cache_dir, "blobs", good[name]["sha256"]) for name in present})
    return result
