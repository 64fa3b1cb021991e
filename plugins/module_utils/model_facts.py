"""What a Hugging Face model directory holds and whether the servers' account can read it, for the SGLang plan.

Reads only. Module sglang_host_facts returns model_facts() as `model` when its option `model` is given.
"""

from __future__ import annotations

import fnmatch
import grp
import hashlib
import json
import os
import pwd
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.mtp import has_mtp_tensors, mtp_layers

INDEX = "model.safetensors.index.json"


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def architectures(config: Mapping[str, Any]) -> list[str]:
    found = config.get("architectures") or (config.get("text_config") or {}).get("architectures") or []
    return [str(name) for name in found]


# The keys SGLang 0.5.23 reads the model's context length from, first found wins (get_context_length).
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's settings: `text_config` where the model nests them (Qwen3.5 and other VLMs)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_length(config: Mapping[str, Any]) -> int | None:
    """The context length SGLang derives from config.json: the first length key, times a plain RoPE scaling factor."""
    text = text_config(config)
    rope = text.get("rope_scaling")
    factor: float = 1
    if isinstance(rope, Mapping):
        factor = rope.get("factor", 1) if isinstance(rope.get("factor", 1), (int, float)) else 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        value = text.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(factor * value)
    return None


def shape(config: Mapping[str, Any]) -> dict[str, int | None]:
    """Heads, KV heads (= heads where config.json does not say), hidden size and context length of the text model."""
    text = text_config(config)
    heads = _int_or_none(text.get("num_attention_heads"))
    kv_heads = _int_or_none(text.get("num_key_value_heads"))
    return {
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads if kv_heads is not None else heads,
        "hidden_size": _int_or_none(text.get("hidden_size")),
        "max_position_embeddings": _int_or_none(text.get("max_position_embeddings")),
        "context_length": context_length(config),
    }


def sha256_of(path: str | os.PathLike[str]) -> str:
    """A file's SHA-256 (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Where transformers finds a processor's settings (the image processor's, or an audio model's feature extractor's):
# their own file, or (transformers 5) nested in processor_config.json.
PROCESSOR_FILE = "preprocessor_config.json"
NESTED_PROCESSOR_FILE = "processor_config.json"
NESTED_PROCESSOR_KEYS = ("image_processor", "feature_extractor", "audio_processor")
# Where a tokenizer or processor takes its chat template from: its own file (the processor's legacy JSON one too), or a
# `chat_template` key of tokenizer_config.json or processor_config.json; and named templates in a folder.
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
CHAT_TEMPLATE_KEY_FILES = ("tokenizer_config.json", NESTED_PROCESSOR_FILE)
CHAT_TEMPLATE_DIR = "additional_chat_templates"


def tokenizer_files(path: str) -> dict[str, str | None]:
    """What SGLang loads from a tokenizer directory besides the tokenizer, by the file that holds it (None: nowhere):
    `processor_config`, the processor's settings a multimodal model's processor needs at start, and `chat_template`.
    Reads only names and small JSON files, and only until one is found."""
    processor: str | None = None
    if os.path.isfile(os.path.join(path, PROCESSOR_FILE)):
        processor = PROCESSOR_FILE
    else:
        nested = _read_json(os.path.join(path, NESTED_PROCESSOR_FILE)) or {}
        if any(isinstance(nested.get(key), dict) for key in NESTED_PROCESSOR_KEYS):
            processor = NESTED_PROCESSOR_FILE
    template = next((name for name in CHAT_TEMPLATE_FILES if os.path.isfile(os.path.join(path, name))), None)
    for name in CHAT_TEMPLATE_KEY_FILES:
        if template is None and (_read_json(os.path.join(path, name)) or {}).get("chat_template"):
            template = name
    if template is None:
        try:
            named = [name for name in os.listdir(os.path.join(path, CHAT_TEMPLATE_DIR)) if name.endswith(".jinja")]
        except OSError:
            named = []
        template = f"{CHAT_TEMPLATE_DIR}/" if named else None
    return {"processor_config": processor, "chat_template": template}


def tokenizer_directory(path: str) -> dict[str, Any]:
    """A tokenizer directory other than the model's (--tokenizer-path): whether it is one, and tokenizer_files()."""
    exists = os.path.isdir(path)
    return {"path": path, "exists": exists, **(tokenizer_files(path) if exists else {})}


def describe(path: str, checksums: Mapping[str, str], verified: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the model directory holds. `checksums` (file name -> SHA-256) are checked; a file whose size, modification
    time and inode match its entry in `verified` (as an earlier run returned it) is not read again."""
    facts: dict[str, Any] = {"path": path, "exists": os.path.isdir(path)}
    if not facts["exists"]:
        return facts
    config = _read_json(os.path.join(path, "config.json"))
    facts["config"] = config is not None
    facts["architectures"] = architectures(config or {})
    facts["mtp_layers"] = mtp_layers(config or {})
    facts.update(shape(config or {}))
    # What decides how SGLang starts a multimodal model: the model type (its conversation templates and processors
    # are chosen by it), code of the model's own (auto_map), the vision tower (a chat completion as the warm-up), a
    # checkpoint that declares itself text-only, and what the directory holds for the processor and the chat template.
    facts["model_type"] = str((config or {}).get("model_type") or "") or None
    facts["auto_map"] = bool((config or {}).get("auto_map"))
    facts["vision_config"] = isinstance((config or {}).get("vision_config"), dict)
    facts["language_model_only"] = (config or {}).get("language_model_only") is True
    facts.update(tokenizer_files(path))
    index = _read_json(os.path.join(path, INDEX))
    if index is not None:
        weight_map = index.get("weight_map") or {}
        shards = sorted(set(weight_map.values()))
        facts["total_size"] = int((index.get("metadata") or {}).get("total_size") or 0)
        facts["tensor_count"] = len(weight_map)
        facts["has_mtp_tensors"] = has_mtp_tensors(weight_map, text_config(config or {}).get("num_hidden_layers"))
    else:
        shards = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
        facts["total_size"] = 0
        facts["has_mtp_tensors"] = False
    sizes = {name: os.path.getsize(os.path.join(path, name)) for name in shards if os.path.isfile(os.path.join(path, name))}
    facts["shards"] = len(shards)
    facts["shard_bytes"] = sum(sizes.values())
    facts["missing_shards"] = [name for name in shards if name not in sizes]
    facts["empty_shards"] = [name for name, size in sizes.items() if size == 0]
    problems = {}
    facts["verified"], facts["hashed"] = {}, []
    for name, expected in sorted(checksums.items()):
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path):
            problems[name] = "file to checksum is missing"
            continue
        status = os.stat(file_path)
        identity = {"size": status.st_size, "mtime_ns": status.st_mtime_ns, "inode": status.st_ino}
        known = (verified or {}).get(file_path) or {}
        if {key: known.get(key) for key in identity} == identity and known.get("sha256"):
            digest = str(known["sha256"])
        else:
            digest = sha256_of(file_path)
            facts["hashed"].append(name)
        facts["verified"][file_path] = {**identity, "sha256": digest}
        if digest != str(expected).lower():
            problems[name] = "SHA-256 differs from sglang_model_sha256"
    facts["checksum_problems"] = problems
    return facts


def read_verified(path: str) -> dict[str, Any]:
    """The files an earlier run verified (`describe`'s `verified`, kept in a JSON file); empty when there is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


# Paths the servers' unit hides from them (ProtectHome=yes, PrivateTmp=yes in _sglang_server_sandbox): a model
# there is readable by root, so it passes a root-run check, and absent for the server.
HIDDEN_PREFIXES = (
    ("/home", "ProtectHome=yes"),
    ("/root", "ProtectHome=yes"),
    ("/run/user", "ProtectHome=yes"),
    ("/tmp", "PrivateTmp=yes"),
    ("/var/tmp", "PrivateTmp=yes"),
)
# Besides config.json, the index and the shards, the server reads the tokenizer and generation settings.
READ_PATTERNS = ("*.json", "*.jinja", "tokenizer*", "*.model", "*.tiktoken", "vocab*", "merges.txt")


def hidden_by(path: str) -> str | None:
    """The sandbox setting that hides `path` (or where its symlinks lead) from the servers, or None."""
    for candidate in (os.path.abspath(path), os.path.realpath(path)):
        for prefix, setting in HIDDEN_PREFIXES:
            if candidate == prefix or candidate.startswith(prefix + "/"):
                return f"{setting} hides {prefix}"
    return None


def files_to_read(path: str) -> list[str]:
    """The model's files the server opens (those that exist): config.json, the index, every shard, the tokenizer."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    wanted = {name for name in names if any(fnmatch.fnmatch(name, pattern) for pattern in READ_PATTERNS)}
    index = _read_json(os.path.join(path, INDEX))
    if index is not None:
        wanted.update(str(shard) for shard in (index.get("weight_map") or {}).values())
    else:
        wanted.update(name for name in names if name.endswith(".safetensors"))
    return sorted(name for name in wanted if os.path.isfile(os.path.join(path, name)))


def may_access(st: os.stat_result, uid: int | None, gids: frozenset[int], want: int) -> bool:
    """The permission bits' answer (no ACLs) for uid/gids; `want` is a mask of 4 (read), 2 (write), 1 (search).

    uid None: an account that does not exist yet, of no group that owns anything (the "other" bits only).
    """
    if uid == 0:
        return True
    if uid is not None and st.st_uid == uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in gids:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def group_id(group: str) -> int | None:
    try:
        return grp.getgrnam(group).gr_gid if group else None
    except KeyError:
        return None


def account(user: str, group: str = "") -> tuple[int | None, frozenset[int]]:
    """The uid (None: no such account yet) and the groups the unit's process gets: as systemd's User= and Group=
    set them (initgroups: Group=, or the account's primary group, plus every group that lists the account)."""
    gid = group_id(group)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None, frozenset({gid} if gid is not None else ())
    return entry.pw_uid, frozenset(os.getgrouplist(user, entry.pw_gid if gid is None else gid))


def _needs(path: str, names: list[str]) -> list[tuple[str, int, str]]:
    """(path, mask, what) for every directory on the way (search; the model directory also read) and every file."""
    checks: list[tuple[str, int, str]] = []
    parts = os.path.abspath(path).split("/")
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth]) or "/"
        checks.append((directory, 1, "directory not searchable"))
    checks.append((os.path.abspath(path), 5, "directory not readable and searchable"))
    checks.extend((os.path.join(os.path.abspath(path), name), 4, "not readable") for name in names)
    return checks


def unreadable_by_bits(path: str, names: list[str], uid: int | None, gids: frozenset[int]) -> list[str]:
    """One "path: reason" per directory or file the account may not read, by the permission bits."""
    found = []
    for target, mask, what in _needs(path, names):
        try:
            st = os.stat(target)
        except OSError as error:
            found.append(f"{target}: {error.strerror}")
            continue
        if not may_access(st, uid, gids, mask):
            found.append(f"{target}: {what} ({stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid})")
            if mask & 1:
                break  # nothing below a directory it cannot search is reachable: one line says it
    return found


def unreadable_as_account(path: str, names: list[str], uid: int, gid: int, gids: frozenset[int]) -> list[str]:
    """The same, asked of the kernel by a child that became the account (ACLs included). Needs root."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the account, ask, report, exit without running anything of the parent's
        code = 0
        try:
            os.close(reader)
            os.setgroups(sorted(gids))
            os.setgid(gid)
            os.setuid(uid)
            found = []
            for target, mask, what in _needs(path, names):
                wanted = (os.R_OK if mask & 4 else 0) | (os.X_OK if mask & 1 else 0)
                if not os.access(target, wanted):
                    try:
                        st = os.stat(target)
                        found.append(f"{target}: {what} ({stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid})")
                    except OSError as error:
                        found.append(f"{target}: {error.strerror}")
                    if mask & 1:
                        break  # nothing below is reachable
            os.write(writer, json.dumps(found).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(writer)
    chunks = []
    while chunk := os.read(reader, 1 << 16):
        chunks.append(chunk)
    os.close(reader)
    _pid, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise OSError(f"the access check as uid {uid} failed")
    return [str(line) for line in json.loads(b"".join(chunks))]


def service_access(path: str, user: str, group: str = "") -> dict[str, Any]:
    """Whether the servers' account can read the model: hidden_by, unreadable ("path: reason" lines), read_as."""
    facts: dict[str, Any] = {"hidden_by": hidden_by(path), "unreadable": []}
    if not user or not os.path.isdir(path):
        return facts
    names = files_to_read(path)
    uid, gids = account(user, group)
    if uid is not None and os.geteuid() == 0:
        try:
            gid = group_id(group)
            gid = pwd.getpwnam(user).pw_gid if gid is None else gid
            facts["unreadable"] = unreadable_as_account(path, names, uid, gid, gids)
            facts["read_as"] = f"{user} (uid {uid})"
            return facts
        except (KeyError, OSError):
            pass
    facts["unreadable"] = unreadable_by_bits(path, names, uid, gids)
    facts["read_as"] = f"{user} (uid {uid}, permission bits)" if uid is not None else f"{user} (not created yet: other bits)"
    return facts


def free_bytes(path: str) -> dict[str, Any]:
    """The bytes free to root-owned files on the filesystem `path` is (or would be) on: of its nearest existing
    ancestor (`disk_path`), and that filesystem's device number (`disk_device`: two paths on one filesystem share it)."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and existing != "/":
        existing = os.path.dirname(existing)
    found = os.statvfs(existing)
    return {"disk_path": existing, "disk_free_bytes": found.f_bavail * found.f_frsize, "disk_device": os.stat(existing).st_dev}


def revisions(path: str, link: str) -> dict[str, Any]:
    """For a model kept as one directory per revision beside a stable link (`link`, e.g. <root>/<repo>/current):
    where the link points, and every revision directory beside `path` with its modification time."""
    parent = os.path.dirname(os.path.abspath(path))
    found = []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        names = []
    for name in names:
        candidate = os.path.join(parent, name)
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            found.append({"path": candidate, "mtime": os.stat(candidate).st_mtime})
    try:
        target: str | None = os.readlink(link)
    except OSError:
        target = None
    return {"link_target": target, "revisions": found}


def model_facts(
    path: str,
    checksums: Mapping[str, str],
    user: str = "",
    group: str = "",
    verified_file: str = "",
    link: str = "",
    tokenizer_paths: Sequence[str] = (),
) -> dict[str, Any]:
    """describe() (with the files verified earlier, as `verified_file` keeps them) and, for the servers' account `user`
    (and `group`), service_access(): the plan's `model`; the free space where it is (or goes); with `link`, the
    revisions beside it (revisions()); with `tokenizer_paths`, each of those directories as `tokenizers`
    (tokenizer_directory(), by path)."""
    verified = read_verified(verified_file) if verified_file else {}
    facts = {**describe(path, checksums, verified), **service_access(path, user, group), **free_bytes(path)}
    if tokenizer_paths:
        facts["tokenizers"] = {str(tokenizer): tokenizer_directory(str(tokenizer)) for tokenizer in tokenizer_paths}
    return {**facts, **revisions(path, link)} if link else facts
