"""sglang_model_facts: what a model directory holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sglang_model_facts as module


def test_stand_in_reads_as_a_complete_qwen3_6_27b(model_facts: dict[str, Any]) -> None:
    assert model_facts["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert model_facts["mtp_layers"] == 1
    assert model_facts["has_mtp_tensors"] is True
    assert model_facts["total_size"] == 54_035_482_112
    assert model_facts["shards"] == 11
    assert model_facts["missing_shards"] == [] and model_facts["empty_shards"] == []
    assert model_facts["shard_bytes"] >= model_facts["total_size"]


def test_missing_and_empty_shards_and_checksums(stand_in_model_dir: Path) -> None:
    directory = stand_in_model_dir
    (directory / "model-00002-of-00011.safetensors").unlink()
    (directory / "model-00003-of-00011.safetensors").write_bytes(b"")
    (directory / "extra.bin").write_bytes(b"x")
    facts = module.describe(str(directory), {"extra.bin": "0" * 64, "gone.bin": "0" * 64})
    assert facts["missing_shards"] == ["model-00002-of-00011.safetensors"]
    assert facts["empty_shards"] == ["model-00003-of-00011.safetensors"]
    assert set(facts["checksum_problems"]) == {"extra.bin", "gone.bin"}


def test_mtp_layers_at_the_top_level_and_without_an_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}))
    (tmp_path / "model.safetensors").write_bytes(b"12345")
    facts = module.describe(str(tmp_path), {})
    assert facts["mtp_layers"] == 1 and facts["shard_bytes"] == 5 and facts["total_size"] == 0


def test_absent_directory(tmp_path: Path) -> None:
    assert module.describe(str(tmp_path / "nope"), {}) == {"path": str(tmp_path / "nope"), "exists": False}
