"""The model source on the control node (plugin_utils/model_source.py; model_lock.py): the lock file, the verified
cache, the snapshot.

A directory source (a temporary model) covers the cache's logic; a Hub source runs against the test mirror (olah
serving a generated two-commit repository, tests/mirror.py), a real Hugging Face-compatible server.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe, sha256_of
from ansible_collections.sglang.fleet.plugins.plugin_utils import model_lock as ml
from ansible_collections.sglang.fleet.plugins.plugin_utils import model_source as ms

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LOCAL_FILES = {
    "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}\n',
    "model.safetensors": b"\x00" * 4096 + b"weights",
    "tokenizer.json": b'{"version": "1.0"}\n',
    "README.md": b"# a model\n",
    "sub/extra.txt": b"in a subdirectory\n",
    ".git/HEAD": b"ref: refs/heads/main\n",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "src"
    for name, data in LOCAL_FILES.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


@pytest.fixture
def local_source(model_dir: Path) -> dict[str, Any]:
    return {"src": str(model_dir), "name": "Tiny-Model", "revision": "2026-11-30"}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def blob(cache: Path, data: bytes) -> Path:
    return cache / "blobs" / sha256(data)


# Model sources


def test_keys_and_slugs() -> None:
    hub = {"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT}
    local = {"src": "/srv/models/q", "name": "Qwen3.6-27B", "revision": "2026-11-30"}
    assert (ms.source_key(hub), ms.slug(hub)) == (f"Qwen/Qwen3.6-27B@{COMMIT}", "Qwen--Qwen3.6-27B")
    assert (ms.source_key(local), ms.slug(local)) == ("Qwen3.6-27B@2026-11-30", "Qwen3.6-27B")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT, "allow_patterns": ["*.json"]}, []),
        ({"src": "/srv/m", "name": "m", "revision": "r1", "ignore_patterns": "*.md"}, []),
        (
            {"repo": "Qwen/Qwen3.6-27B", "revision": "main"},
            ["revision 'main' is not a commit: pin the commit (playbooks/model_lock.yml records it)"],
        ),
        (
            {"repo": "Qwen/Qwen3.6-27B"},
            ["revision is missing: pin the commit (playbooks/model_lock.yml records it)"],
        ),
        (
            {"repo": "Qwen/Qwen3.6-27B", "revision": COMMIT, "branch": "main"},
            ["unknown keys branch: a Hub source takes repo, revision, allow_patterns, ignore_patterns"],
        ),
        (
            {"repo": "q", "src": "/srv/m", "revision": COMMIT},
            ["the model source has both repo (a Hub repository) and src (a directory on the control node): give one"],
        ),
        (
            {"name": "m", "revision": "r1"},
            ["the model source has neither repo (a Hub repository, org/name) nor src (a directory on the control node)"],
        ),
        (
            {"src": "models/q", "name": "q", "revision": "r1"},
            ["src 'models/q' is not an absolute path (a directory on the control node)"],
        ),
        (
            {"src": "/srv/m", "name": "../m", "revision": "r1"},
            ["name '../m' is not a plain name (letters, digits, '.', '_', '+', '-'): it names a folder"],
        ),
        (
            {"repo": "no-org", "revision": COMMIT, "allow_patterns": [1]},
            [
                "repo 'no-org' is not a Hub repository id of the form org/name",
                "allow_patterns is not a list of patterns: [1]",
            ],
        ),
        ("Qwen/Qwen3.6-27B", ["the model source is not a mapping: 'Qwen/Qwen3.6-27B'"]),
    ],
)
def test_source_problems(source: Any, expected: list[str]) -> None:
    assert ms.source_problems(source) == expected


def test_a_branch_is_accepted_for_locking() -> None:
    assert ms.source_problems({"repo": "Qwen/Qwen3.6-27B", "revision": "main"}, pinned=False) == []


# The lock file


def test_the_lock_entry_is_written_stable_and_beside_the_others(tmp_path: Path, local_source: dict[str, Any]) -> None:
    lock = tmp_path / "inventory/model-lock.yml"
    files = ms.remote_files(local_source)
    assert ml.write_lock(str(lock), "other@1", {"a.json": {"size": 1, "sha256": "f" * 64}})
    assert ml.write_lock(str(lock), ms.source_key(local_source), files)
    text = lock.read_text()
    assert not ml.write_lock(str(lock), ms.source_key(local_source), dict(reversed(list(files.items())))), "same files"
    assert lock.read_text() == text
    assert text.startswith("# ") and "playbooks/model_lock.yml" in text.splitlines()[0]
    assert f"      config.json: {{size: {len(LOCAL_FILES['config.json'])}, sha256: {sha256(LOCAL_FILES['config.json'])}}}" in text
    assert list(ml.read_lock(str(lock))) == ["Tiny-Model@2026-11-30", "other@1"]
    assert yaml.safe_load(text)["models"]["Tiny-Model@2026-11-30"]["files"] == files
    assert [name for name in os.listdir(lock.parent) if name.startswith(".")] == [], "no temporary file is left"


def test_check_mode_reports_without_writing(tmp_path: Path) -> None:
    lock = tmp_path / "model-lock.yml"
    assert ml.write_lock(str(lock), "m@1", {"a": {"size": 1, "sha256": "0" * 64}}, check_mode=True)
    assert not lock.exists() and ml.read_lock(str(lock)) == {}


def test_a_file_that_is_no_lock_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "model-lock.yml"
    lock.write_text("- a list\n")
    with pytest.raises(ml.ModelSourceError, match="not a lock file"):
        ml.write_lock(str(lock), "m@1", {})
    assert lock.read_text() == "- a list\n"


def test_a_hand_broken_entry_is_refused_not_rewritten(tmp_path: Path) -> None:
    lock = tmp_path / "model-lock.yml"
    lock.write_text("models:\n  other@1:\n    files:\n      a.json: {size: 1}\n")
    with pytest.raises(ml.ModelSourceError, match=r"entry other@1: a\.json: the lock entry has no SHA-256"):
        ml.write_lock(str(lock), "m@1", {"b.json": {"size": 1, "sha256": "0" * 64}})


# A directory source


def test_the_directory_s_files_leave_git_out_and_apply_the_patterns(local_source: dict[str, Any]) -> None:
    everything = ms.remote_files(local_source)
    assert sorted(everything) == ["README.md", "config.json", "model.safetensors", "sub/extra.txt", "tokenizer.json"]
    assert everything["sub/extra.txt"] == {"size": 18, "sha256": sha256(LOCAL_FILES["sub/extra.txt"])}
    selected = ms.remote_files({**local_source, "allow_patterns": ["*.json", "sub/"], "ignore_patterns": "tokenizer*"})
    assert sorted(selected) == ["config.json", "sub/extra.txt"]


def test_a_missing_directory_is_an_error(local_source: dict[str, Any]) -> None:
    with pytest.raises(ml.ModelSourceError, match="is not a directory on the control node"):
        ms.remote_files({**local_source, "src": "/nonexistent/model"})


def test_fetch_fills_the_cache_and_a_snapshot_of_relative_links(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    result = ms.fetch(local_source, files, str(cache))
    assert result.problems == {} and result.reused == []
    assert sorted(result.fetched) == sorted(files)
    assert result.fetched_bytes == sum(entry["size"] for entry in files.values())
    snapshot = Path(result.snapshot)
    assert snapshot == cache / "snapshots/Tiny-Model/2026-11-30"
    for name in files:
        link = snapshot / name
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.read_bytes() == LOCAL_FILES[name]
        assert link.resolve() == blob(cache, LOCAL_FILES[name]).resolve()
    assert os.readlink(snapshot / "sub/extra.txt") == f"../../../../blobs/{sha256(LOCAL_FILES['sub/extra.txt'])}"
    memo = json.loads((cache / "verified.json").read_text())
    assert set(memo) == {entry["sha256"] for entry in files.values()}
    assert describe(str(snapshot), {})["architectures"] == ["Qwen3ForCausalLM"]


def test_a_second_fetch_reads_nothing_again(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    ms.fetch(local_source, files, str(cache))
    inode = (Path(ms.snapshot_path(local_source, str(cache))) / "config.json").lstat().st_ino
    again = ms.fetch(local_source, files, str(cache))
    assert (again.fetched, again.fetched_bytes, again.hashed, again.problems) == ([], 0, [], {})
    assert sorted(again.reused) == sorted(files)
    assert (Path(again.snapshot) / "config.json").lstat().st_ino == inode, "an unchanged snapshot is kept as it is"


def test_a_truncated_blob_is_fetched_again(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    ms.fetch(local_source, files, str(cache))
    weights = blob(cache, LOCAL_FILES["model.safetensors"])
    weights.chmod(0o644)
    with weights.open("r+b") as handle:
        handle.truncate(100)
    again = ms.fetch(local_source, files, str(cache))
    assert again.fetched == ["model.safetensors"] and again.fetched_bytes == len(LOCAL_FILES["model.safetensors"])
    assert weights.read_bytes() == LOCAL_FILES["model.safetensors"] and again.problems == {}


def test_a_corrupted_blob_of_the_same_size_is_hashed_and_fetched_again(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    ms.fetch(local_source, files, str(cache))
    weights = blob(cache, LOCAL_FILES["model.safetensors"])
    weights.chmod(0o644)
    weights.write_bytes(b"\x01" * len(LOCAL_FILES["model.safetensors"]))
    later = time.time() + 5
    os.utime(weights, (later, later))
    again = ms.fetch(local_source, files, str(cache))
    assert again.fetched == ["model.safetensors"] and again.problems == {}
    assert weights.read_bytes() == LOCAL_FILES["model.safetensors"]
    assert (Path(again.snapshot) / "model.safetensors").read_bytes() == LOCAL_FILES["model.safetensors"]


def test_a_touched_but_intact_blob_is_hashed_once_and_kept(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    ms.fetch(local_source, files, str(cache))
    later = time.time() + 5
    os.utime(blob(cache, LOCAL_FILES["config.json"]), (later, later))
    again = ms.fetch(local_source, files, str(cache))
    assert (again.fetched, again.hashed) == ([], ["config.json"])
    assert ms.fetch(local_source, files, str(cache)).hashed == []


def test_a_source_file_changed_after_locking_is_a_problem_naming_it(
    local_source: dict[str, Any], model_dir: Path, cache: Path
) -> None:
    files = ms.remote_files(local_source)
    (model_dir / "tokenizer.json").write_bytes(b'{"version": "2.0"}\n')
    (model_dir / "README.md").unlink()
    result = ms.fetch(local_source, files, str(cache))
    assert set(result.problems) == {"tokenizer.json", "README.md"}
    problem = result.problems["tokenizer.json"]
    assert problem.startswith("tokenizer.json: 19 bytes with SHA-256 ")
    assert sha256(b'{"version": "2.0"}\n') in problem and files["tokenizer.json"]["sha256"] in problem
    assert problem.endswith(
        "the source's file differs from the lock file: update the lock (playbooks/model_lock.yml) if the change is intended"
    )
    assert result.problems["README.md"].startswith("README.md: not fetched: FileNotFoundError: [Errno 2]")
    snapshot = Path(result.snapshot)
    assert not (snapshot / "tokenizer.json").exists() and (snapshot / "config.json").exists()
    assert not blob(cache, b'{"version": "2.0"}\n').exists(), "a wrong file never becomes a blob"


def test_a_file_left_out_of_the_lock_leaves_the_snapshot(local_source: dict[str, Any], cache: Path) -> None:
    files = ms.remote_files(local_source)
    ms.fetch(local_source, files, str(cache))
    fewer = {name: entry for name, entry in files.items() if not name.startswith("sub/")}
    result = ms.fetch(local_source, fewer, str(cache))
    assert (result.fetched, result.problems) == ([], {})
    assert not (Path(result.snapshot) / "sub").exists() and (Path(result.snapshot) / "README.md").exists()
    assert [name for name in os.listdir(Path(result.snapshot).parent) if name.startswith(".")] == []


def test_files_that_do_not_fit_the_cache_are_one_problem_and_none_is_fetched(
    local_source: dict[str, Any], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = ms.remote_files(local_source)
    kept = {"config.json": files["config.json"]}
    ms.fetch(local_source, kept, str(cache))
    to_fetch = sum(entry["size"] for name, entry in files.items() if name != "config.json")
    real_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=to_fetch - 1))
    short = ms.fetch(local_source, files, str(cache))
    assert (short.fetched, short.fetched_bytes, short.reused) == ([], 0, ["config.json"])
    [(key, problem)] = short.problems.items()
    assert key == ms.CACHE_ROOM
    assert problem == (
        f"{len(files) - 1} file(s) to fetch need {to_fetch / ms.GIB:.1f} GiB in {cache} and its filesystem has "
        f"{(to_fetch - 1) / ms.GIB:.1f} GiB free: nothing was fetched"
    )
    assert os.listdir(short.snapshot) == ["config.json"], "the snapshot links only what the cache holds"
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_usage(path)._replace(free=to_fetch))
    assert ms.fetch(local_source, files, str(cache)).problems == {}


def test_a_hand_edited_lock_entry_is_a_problem_not_an_escape(local_source: dict[str, Any], cache: Path) -> None:
    files: dict[str, Any] = {"../../etc/passwd": {"size": 1, "sha256": "0" * 64}, "config.json": {"size": 1}}
    result = ms.fetch(local_source, files, str(cache))
    assert result.problems == {
        "../../etc/passwd": "not a relative path inside the model (no '..', no leading '/')",
        "config.json": "the lock entry has no SHA-256 (64 lowercase hex digits): None",
    }
    assert os.listdir(result.snapshot) == []


# A Hub source, served by the test mirror


@pytest.fixture(scope="session")
def mirror() -> Iterator[Any]:
    from mirror import start_mirror

    yield start_mirror()


def hub_source(mirror: Any, commit: str) -> dict[str, Any]:
    return {"repo": mirror.repo, "revision": commit}


def test_the_hub_tree_gives_each_file_s_sha256_as_the_download_has_it(mirror: Any, tmp_path: Path) -> None:
    for commit in mirror.commits:
        source = hub_source(mirror, commit)
        files = ms.remote_files(source, mirror.endpoint)
        assert "config.json" in files and "model.safetensors.index.json" in files
        for name in [name for name in files if name.endswith(".safetensors")] + ["config.json"]:
            path = ms.download(source, name, str(tmp_path / commit), mirror.endpoint, "")
            assert files[name] == {"size": os.path.getsize(path), "sha256": sha256_of(path)}, name


def test_the_hub_tree_applies_the_patterns(mirror: Any) -> None:
    source = {**hub_source(mirror, mirror.commits[0]), "allow_patterns": ["*.safetensors"]}
    assert sorted(ms.remote_files(source, mirror.endpoint)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


def test_a_branch_resolves_to_the_latest_commit(mirror: Any) -> None:
    assert ms.resolve_revision({"repo": mirror.repo, "revision": "main"}, mirror.endpoint) == mirror.commits[-1]


def test_fetching_the_second_commit_reuses_the_unchanged_blobs(mirror: Any, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    first, second = (hub_source(mirror, commit) for commit in mirror.commits)
    first_files, second_files = ms.remote_files(first, mirror.endpoint), ms.remote_files(second, mirror.endpoint)
    one = ms.fetch(first, first_files, cache, mirror.endpoint)
    assert (one.problems, sorted(one.fetched)) == ({}, sorted(first_files))
    changed = sorted(name for name in second_files if first_files.get(name) != second_files[name])
    assert changed, "the mirror's second commit changes files"
    two = ms.fetch(second, second_files, cache, mirror.endpoint)
    assert (two.problems, sorted(two.fetched)) == ({}, changed)
    assert sorted(two.reused) == sorted(set(second_files) - set(changed))
    assert two.fetched_bytes == sum(second_files[name]["size"] for name in changed)
    facts = describe(two.snapshot, {})
    assert facts["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert facts["shards"] == 2 and facts["missing_shards"] == [] and facts["shard_bytes"] > 0
    assert Path(one.snapshot).name == mirror.commits[0] and Path(two.snapshot).name == mirror.commits[1]
    assert Path(two.snapshot).parent.name == mirror.repo.replace("/", "--")


def test_progress_bars_are_hidden_only_for_a_download(mirror: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub's bars would write to the worker's stdout; importing them costs a run that fetches nothing
    about 50 ms (asyncio), in each worker."""
    hidden: list[bool] = []
    monkeypatch.setattr(ms, "hide_progress_bars", lambda: hidden.append(True))
    source = hub_source(mirror, mirror.commits[0])
    files = ms.remote_files(source, mirror.endpoint)
    assert ms.fetch(source, files, str(tmp_path / "cache"), mirror.endpoint).fetched and hidden == [True]
    assert not ms.fetch(source, files, str(tmp_path / "cache"), mirror.endpoint).fetched and hidden == [True]


def test_a_hub_file_that_differs_from_the_lock_is_a_problem(mirror: Any, tmp_path: Path) -> None:
    source = hub_source(mirror, mirror.commits[0])
    files = ms.remote_files(source, mirror.endpoint)
    wrong = {**files, "config.json": {"size": files["config.json"]["size"], "sha256": "0" * 64}}
    result = ms.fetch(source, wrong, str(tmp_path / "cache"), mirror.endpoint)
    assert list(result.problems) == ["config.json"] and "the lock has" in result.problems["config.json"]


def test_an_unknown_hub_file_is_a_problem_not_an_exception(mirror: Any, tmp_path: Path) -> None:
    source = hub_source(mirror, mirror.commits[0])
    missing = {"no-such-file.json": {"size": 2, "sha256": "0" * 64}}
    result = ms.fetch(source, missing, str(tmp_path / "cache"), mirror.endpoint)
    assert result.problems["no-such-file.json"].startswith("no-such-file.json: not fetched: RemoteEntryNotFoundError: 404")


def test_a_server_that_does_not_answer_is_tried_once(mirror: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)  # huggingface_hub's retries, without their 23 s of waiting
    source = hub_source(mirror, mirror.commits[0])
    files = {name: {"size": 2, "sha256": f"{index}" * 64} for index, name in enumerate(("a.json", "b.json"))}
    result = ms.fetch(source, files, str(tmp_path / "cache"), "http://127.0.0.1:9")
    assert result.problems["a.json"].endswith("(ConnectError: [Errno 111] Connection refused)")
    assert result.problems["b.json"].startswith("b.json: not fetched: the source did not answer for an earlier file (")
    assert len(waits) == 5, "only the first file was retried"
    with pytest.raises(ml.ModelSourceError, match="ConnectError: \\[Errno 111\\] Connection refused"):
        ms.remote_files(source, "http://127.0.0.1:9")


# Links out of a directory source (issue 38, finding 5)


def test_a_link_out_of_the_source_directory_is_refused_and_never_read(
    local_source: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    """tokenizer_config.json -> ~/.ssh/id_ed25519 would be locked, fetched and sent to every host, 0644."""
    secret = tmp_path / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (model_dir / "tokenizer_config.json").symlink_to(secret)
    with pytest.raises(ml.ModelSourceError) as raised:
        ms.remote_files(local_source)
    message = str(raised.value)
    assert message.startswith("Tiny-Model@2026-11-30: tokenizer_config.json: its real path ")
    assert f"is outside src {model_dir}" in message and "; fix: " in message
    assert "PRIVATE KEY" not in message


def test_a_directory_linked_from_outside_is_refused_file_by_file(
    local_source: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.json").write_text("{}")
    (model_dir / "linked").symlink_to(elsewhere)
    with pytest.raises(ml.ModelSourceError, match=r"linked/a\.json: its real path .* is outside src"):
        ms.remote_files(local_source)


def test_a_link_inside_the_source_is_followed(local_source: dict[str, Any], model_dir: Path) -> None:
    (model_dir / "tokenizer_copy.json").symlink_to(model_dir / "tokenizer.json")
    assert ms.remote_files(local_source)["tokenizer_copy.json"]["sha256"] == sha256(LOCAL_FILES["tokenizer.json"])


def test_a_file_replaced_by_a_link_out_after_locking_is_not_fetched(
    local_source: dict[str, Any], model_dir: Path, cache: Path, tmp_path: Path
) -> None:
    files = ms.remote_files(local_source)
    secret = tmp_path / "secret"
    secret.write_bytes(LOCAL_FILES["tokenizer.json"])  # even with the locked content
    (model_dir / "tokenizer.json").unlink()
    (model_dir / "tokenizer.json").symlink_to(secret)
    result = ms.fetch(local_source, files, str(cache))
    assert "is outside src" in result.problems["tokenizer.json"]
    assert not blob(cache, LOCAL_FILES["tokenizer.json"]).exists()
