"""The generated test model (tests/fixtures/model_repo.py): deterministic, valid safetensors, a complete Qwen3.5 layout
with MTP as model_facts sees it, and a git repository whose commits are the same everywhere."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe
from fixtures.model_repo import ARCHITECTURE, REPO_ID, SHARDS, build_repo, create_git_repo
from mirror import parse, start_mirror

ROOT = Path(__file__).resolve().parents[2]
# The commits create_git_repo makes: fixed content, identity and dates give the same SHAs on every machine.
COMMITS = ["e247d76e82a7962099177c915d3e2b064ec8653b", "b2e11e6b5e2bc116ec559b70504d254b51f24603"]
DTYPE_BYTES = {"BF16": 2}
# What a Qwen3.5 repository holds besides its weights: the tokenizer, the chat template and the image and video
# processors (real SGLang 0.5.17 refuses the model at start without preprocessor_config.json).
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
}
FILES = {"config.json", "generation_config.json", "model.safetensors.index.json", *TOKENIZER_FILES, *SHARDS}
# Real SGLang 0.5.17 served the generated repository (revision 1) as ct129 and b200 launch it: this recording.
RECORDING = ROOT / "tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5"


def digests(path: Path) -> dict[str, str]:
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in sorted(path.iterdir()) if file.is_file()}


def read_safetensors(path: Path) -> tuple[dict[str, Any], int, int]:
    """The header of a safetensors file, where its data starts and how many data bytes follow."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header: dict[str, Any] = json.loads(raw[8 : 8 + length])
    return header, 8 + length, len(raw) - 8 - length


@pytest.fixture(scope="module")
def revisions(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    built = {}
    for revision in (1, 2):
        built[revision] = tmp_path_factory.mktemp(f"revision{revision}")
        build_repo(built[revision], revision)
    return built


def test_the_files_are_the_same_on_every_run(revisions: dict[int, Path], tmp_path: Path) -> None:
    build_repo(tmp_path, 1)
    assert set(digests(tmp_path)) == FILES
    assert digests(tmp_path) == digests(revisions[1])


def test_revision_2_changes_one_shard_alone(revisions: dict[int, Path]) -> None:
    first, second = digests(revisions[1]), digests(revisions[2])
    assert {name for name in FILES if first[name] != second[name]} == {SHARDS[1]}


def test_a_revision_other_than_1_or_2_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="revision must be 1 or 2"):
        build_repo(tmp_path, 3)


@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize("shard", SHARDS)
def test_each_shard_is_a_valid_safetensors_file(revisions: dict[int, Path], revision: int, shard: str) -> None:
    header, data_start, data_bytes = read_safetensors(revisions[revision] / shard)
    assert data_start % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    end = 0
    for name, tensor in sorted(header.items(), key=lambda item: int(item[1]["data_offsets"][0])):
        begin, stop = tensor["data_offsets"]
        assert begin == end, f"{name} does not follow the tensor before it"
        assert stop - begin == math.prod(tensor["shape"]) * DTYPE_BYTES[tensor["dtype"]], name
        end = stop
    assert end == data_bytes


def test_the_index_covers_every_tensor_and_totals_their_bytes(revisions: dict[int, Path]) -> None:
    index = json.loads((revisions[1] / "model.safetensors.index.json").read_text())
    in_shards, total = {}, 0
    for shard in SHARDS:
        header, _, data_bytes = read_safetensors(revisions[1] / shard)
        header.pop("__metadata__")
        in_shards.update(dict.fromkeys(header, shard))
        total += data_bytes
    assert index["weight_map"] == in_shards
    assert index["metadata"]["total_size"] == total


@pytest.mark.parametrize("revision", [1, 2])
def test_model_facts_sees_a_complete_qwen3_5_with_mtp(revisions: dict[int, Path], revision: int) -> None:
    facts = describe(str(revisions[revision]), {})
    assert facts["architectures"] == [ARCHITECTURE]
    assert facts["mtp_layers"] >= 1
    assert facts["has_mtp_tensors"] is True
    assert facts["shards"] == len(SHARDS)
    assert facts["missing_shards"] == []
    assert facts["empty_shards"] == []
    assert facts["shard_bytes"] >= facts["total_size"] > 0
    assert (facts["num_attention_heads"], facts["num_key_value_heads"], facts["hidden_size"]) == (4, 2, 64)


def test_the_config_has_the_real_checkpoints_keys(revisions: dict[int, Path]) -> None:
    real = json.loads((Path(__file__).resolve().parent.parent / "fixtures/models/Qwen3.6-27B/config.json").read_text())
    generated = json.loads((revisions[1] / "config.json").read_text())
    assert generated.keys() == real.keys()
    for nested in ("text_config", "vision_config"):
        assert generated[nested].keys() == real[nested].keys()
    assert len(generated["text_config"]["layer_types"]) == generated["text_config"]["num_hidden_layers"]


def test_the_scripts_lines_parse() -> None:
    output = 'MODEL_MIRROR_ENDPOINT=http://127.0.0.1:18090\nMODEL_MIRROR_REPO=a/b\nMODEL_MIRROR_COMMITS="1 2"\n'
    mirror = parse(output)
    assert (mirror.endpoint, mirror.repo, mirror.commits) == ("http://127.0.0.1:18090", "a/b", ("1", "2"))
    with pytest.raises(ValueError, match="MODEL_MIRROR_COMMITS"):
        parse("MODEL_MIRROR_ENDPOINT=x\nMODEL_MIRROR_REPO=a/b\n")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_the_git_repository_has_the_same_commits_everywhere(revisions: dict[int, Path], tmp_path: Path) -> None:
    start_mirror()  # installs git-lfs where it is absent
    assert create_git_repo(tmp_path) == {"repo": REPO_ID, "commits": COMMITS}
    assert create_git_repo(tmp_path) == {"repo": REPO_ID, "commits": COMMITS}  # from scratch again
    repo = tmp_path / "models" / REPO_ID
    assert git(repo, "rev-parse", "--is-bare-repository") == "false"
    assert git(repo, "rev-list", "v1") == COMMITS[0]
    assert git(repo, "status", "--porcelain") == ""
    assert digests(repo) == {**digests(revisions[2]), ".gitattributes": digests(repo)[".gitattributes"]}
    for commit, revision in zip(COMMITS, (1, 2), strict=True):
        for shard in SHARDS:
            pointer = git(repo, "cat-file", "blob", f"{commit}:{shard}")
            assert f"oid sha256:{digests(revisions[revision])[shard]}" in pointer.splitlines()


def test_the_sandbox_serves_the_first_commit_and_its_lock_holds_the_generated_files(revisions: dict[int, Path]) -> None:
    """inventory/sandbox: every host serves the mirror's repository at its first commit, and the committed lock entry is
    what the generator writes (.gitattributes is git-lfs's, written with the repository)."""
    hosts = yaml.safe_load((ROOT / "inventory/sandbox/hosts.yml").read_text())
    assert hosts["mirror_model"] == {"children": {"sglang_servers": None}}, "every sandbox host, a third one's too"
    served = yaml.safe_load((ROOT / "inventory/sandbox/group_vars/mirror_model.yml").read_text())
    assert served["sglang_model"] == {"repo": REPO_ID, "revision": COMMITS[0]} and served["sglang_model_path"] == ""
    lock = yaml.safe_load((ROOT / "inventory/sandbox/model-lock.yml").read_text())["models"]
    files = lock[f"{REPO_ID}@{COMMITS[0]}"]["files"]
    assert {name: entry["sha256"] for name, entry in files.items() if name in FILES} == digests(revisions[1])
    assert set(files) == FILES | {".gitattributes"}


def test_production_pins_its_model_by_repository_and_commit() -> None:
    """inventory/production: every host serves Qwen3.6-27B at a full commit (group_vars), none by a path of its own."""
    group = yaml.safe_load((ROOT / "inventory/production/group_vars/all.yml").read_text())
    assert group["sglang_model"]["repo"] == "Qwen/Qwen3.6-27B"
    assert len(group["sglang_model"]["revision"]) == 40 and int(group["sglang_model"]["revision"], 16) >= 0
    for host_vars in (ROOT / "inventory/production/host_vars").glob("*.yml"):
        assert not {"sglang_model", "sglang_model_path"} & set(yaml.safe_load(host_vars.read_text())), host_vars.name


def test_real_sglang_served_exactly_these_files(revisions: dict[int, Path]) -> None:
    """The recording's listing holds the text of every file but the shards of what real SGLang loaded; the generator
    still writes the same bytes, so the sandbox serves what the GPU run proved loadable."""
    listing = json.loads((RECORDING / "models/listing.json").read_text())["tiny-qwen3.5"]
    assert set(listing["files"]) == FILES
    for name in FILES - set(SHARDS):
        assert listing[name] == (revisions[1] / name).read_text(), name
    headline = json.loads((RECORDING / "summary.json").read_text())["headline"]
    assert {tag: headline[tag]["ready"] for tag in ("ct129", "b200", "control")} == {"ct129": True, "b200": True, "control": True}


def test_the_tokenizer_covers_the_model_vocabulary() -> None:
    """Every id the model can produce is a token: byte-level symbols, learnt merges, then the special tokens at the ids
    config.json and generation_config.json name."""
    from fixtures import model_repo

    tokenizer = model_repo.tokenizer()
    ids = sorted([*tokenizer["model"]["vocab"].values(), *(t["id"] for t in tokenizer["added_tokens"])])
    assert ids == list(range(model_repo.VOCAB))
    special = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    config, generation = model_repo.config(), model_repo.generation_config(1)
    assert special["<|image_pad|>"] == config["image_token_id"] and special["<|video_pad|>"] == config["video_token_id"]
    assert special["<|im_end|>"] in generation["eos_token_id"] and special["<|im_start|>"] == generation["bos_token_id"]
    assert len(tokenizer["model"]["merges"]) == model_repo.FIRST_SPECIAL - 256


def test_the_qwen36_stand_in_carries_the_generated_processors_and_template(revisions: dict[int, Path]) -> None:
    """tests/fixtures/models/Qwen3.6-27B (Molecule's and the preflight corpus's model) starts only with them."""
    stand_in = ROOT / "tests/fixtures/models/Qwen3.6-27B"
    for name in ("preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja"):
        assert (stand_in / name).read_bytes() == (revisions[1] / name).read_bytes(), name
