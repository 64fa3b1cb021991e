"""The model facts (module_utils/model_facts.py): what a model directory holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils import model_facts as module
from fleet import ROOT


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


def test_a_verified_file_is_not_read_again_until_its_size_time_or_inode_changes(tmp_path: Path, monkeypatch: Any) -> None:
    import hashlib
    import os

    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"weights")
    expected = {"model.safetensors": hashlib.sha256(b"weights").hexdigest()}
    first = module.describe(str(tmp_path), expected)
    assert first["hashed"] == ["model.safetensors"] and first["checksum_problems"] == {}
    record = tmp_path / "verified.json"
    record.write_text(json.dumps(first["verified"]))

    read: list[str] = []
    hash_file = module.sha256_of

    def counted(path: str) -> str:
        read.append(path)
        return hash_file(path)

    monkeypatch.setattr(module, "sha256_of", counted)
    again = module.model_facts(str(tmp_path), expected, verified_file=str(record))
    assert again["hashed"] == [] and read == [] and again["checksum_problems"] == {}
    assert again["verified"] == first["verified"]

    os.utime(shard, ns=(1, 1))  # touched: read again, and still right
    touched = module.model_facts(str(tmp_path), expected, verified_file=str(record))
    assert touched["hashed"] == ["model.safetensors"] and touched["checksum_problems"] == {}
    shard.write_bytes(b"corrupt")  # other content: read again, and wrong
    corrupt = module.model_facts(str(tmp_path), expected, verified_file=str(record))
    assert corrupt["checksum_problems"] == {"model.safetensors": "SHA-256 differs from sglang_model_sha256"}
    assert module.read_verified(str(tmp_path / "none.json")) == {}


def test_mtp_layers_at_the_top_level_and_without_an_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}))
    (tmp_path / "model.safetensors").write_bytes(b"12345")
    facts = module.describe(str(tmp_path), {})
    assert facts["mtp_layers"] == 1 and facts["shard_bytes"] == 5 and facts["total_size"] == 0


def test_absent_directory(tmp_path: Path) -> None:
    assert module.describe(str(tmp_path / "nope"), {}) == {"path": str(tmp_path / "nope"), "exists": False}


def test_text_model_shape_is_read_from_text_config(model_facts: dict[str, Any]) -> None:
    """Qwen3.5/3.6 nest the language model's settings in text_config; the plan checks tp and context against them."""
    assert model_facts["num_attention_heads"] == 24
    assert model_facts["num_key_value_heads"] == 4
    assert model_facts["hidden_size"] == 5120
    assert model_facts["max_position_embeddings"] == 262144
    assert model_facts["context_length"] == 262144


def test_shape_at_the_top_level_kv_heads_default_and_rope_scaling(tmp_path: Path) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "hidden_size": 4096,
              "max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = module.describe(str(tmp_path), {})
    assert facts["num_attention_heads"] == 32 and facts["num_key_value_heads"] == 32
    assert facts["context_length"] == 131072, "SGLang multiplies a plain RoPE scaling factor in"
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert module.describe(str(tmp_path), {})["context_length"] == 32768


def test_mtp_is_detected_by_its_config_keys_and_tensor_names() -> None:
    from ansible_collections.sglang.fleet.plugins.module_utils.mtp import has_mtp_tensors, mtp_layers

    assert mtp_layers({"text_config": {"mtp_num_hidden_layers": 2}}) == 2
    assert mtp_layers({"num_nextn_predict_layers": 0, "text_config": {}}) == 0
    assert has_mtp_tensors(["model.layers.0.weight", "mtp.fc.weight"])
    assert has_mtp_tensors(["model.language_model.mtp.layers.0.weight"])
    assert not has_mtp_tensors(["model.layers.0.mtp_gate"])


def test_mtp_tensors_are_found_where_sglangs_loaders_take_them() -> None:
    """Qwen3.5's MTP loader takes `mtp.*`; DeepSeek's NextN the layer after the last (`model.layers.<N>.*`). The
    simulator has its own rule, held to this one on every known checkpoint by tests/contract/test_mtp_rules.py."""
    from ansible_collections.sglang.fleet.plugins.module_utils.mtp import has_mtp_tensors

    assert has_mtp_tensors(["mtp.fc.weight", "model.layers.0.mlp.weight"])
    assert has_mtp_tensors(["model.language_model.mtp.layers.0.weight"])
    assert has_mtp_tensors(["model.layers.61.eh_proj.weight"], num_hidden_layers=61)
    assert not has_mtp_tensors(["model.layers.60.mlp.weight"], num_hidden_layers=61)
    assert not has_mtp_tensors(["model.layers.61.eh_proj.weight"])
    # MiMo's MTP layer (mimo_mtp.py), which real SGLang 0.5.17 took as the draft (tests/recordings/
    # sglang-0.5.17-h200-nextn-without-mtp: the control server).
    assert has_mtp_tensors(["model.mtp_layers.0.input_proj.weight", "model.layers.0.mlp.weight"])


def run_host_facts(arguments: dict[str, Any], tmp_path: Path, module_name: str = "sglang_host_facts") -> dict[str, Any]:
    """Module sglang_host_facts (or `module_name`) run as Ansible runs a module: its arguments in a file, its result on
    stdout (a failed module's too)."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": arguments}))
    module_file = ROOT / f"plugins/modules/{module_name}.py"
    environment = {"PYTHONPATH": str(ROOT / "collections")}
    done = subprocess.run(
        [sys.executable, str(module_file), str(args_file)], capture_output=True, text=True, check=False, env=environment
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_host_facts_reads_the_model_in_the_same_call(stand_in_model_dir: Path, tmp_path: Path) -> None:
    """The plan's one module call: with `model`, sglang_host_facts returns the model facts as `model` as well."""
    no_smi = str(tmp_path / "no-nvidia-smi")
    result = run_host_facts({"nvidia_smi": no_smi, "model": {"path": str(stand_in_model_dir)}}, tmp_path)
    # The free space may change between the two readings (other processes write): its presence is what is compared.
    expected = module.model_facts(str(stand_in_model_dir), {})
    assert isinstance(result["model"].pop("disk_free_bytes"), int) and isinstance(expected.pop("disk_free_bytes"), int)
    assert result["model"] == expected, "sha256, user and group default to empty"
    assert result["ansible_facts"]["sglang_host"]["gpu_error"].startswith(no_smi)
    assert "model" not in run_host_facts({"nvidia_smi": no_smi}, tmp_path)


def test_instance_files_gathers_with_facts_as_host_facts_does(stand_in_model_dir: Path, tmp_path: Path) -> None:
    """Deploy's plan gathers through module sglang_instance_files (its `facts`), the module deploy's probe calls next, so
    both calls share one payload: given sglang_host_facts' options, it answers what that module answers; options that
    module refuses, it refuses as well, naming `facts`."""
    options = {"nvidia_smi": str(tmp_path / "no-nvidia-smi"), "model": {"path": str(stand_in_model_dir)},
               "gather_subset": ["!all", "min"]}  # fmt: skip
    alone = run_host_facts(options, tmp_path)
    shared = run_host_facts({"facts": options}, tmp_path, "sglang_instance_files")
    for result in (alone, shared):
        assert isinstance(result["model"].pop("disk_free_bytes"), int)
        result["ansible_facts"]["sglang_host"].pop("listening")  # other processes open and close ports meanwhile
        assert result["ansible_facts"].pop("ansible_date_time")["epoch"], "Ansible's own facts, gathered as setup does"
    assert shared["ansible_facts"] == alone["ansible_facts"] and shared["model"] == alone["model"]
    assert not shared["changed"] and shared["changed_paths"] == []
    assert shared["invocation"]["module_args"]["facts"]["model"]["sha256"] == {}, "logged as validated, with defaults"
    refused = run_host_facts({"facts": {"nvidia_smi": "nvidia-smi", "model": {"sha256": {}}}}, tmp_path, "sglang_instance_files")
    assert refused["failed"] and refused["msg"].startswith("facts: ") and "path" in refused["msg"], refused
