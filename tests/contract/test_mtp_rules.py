"""The MTP rule is written twice on purpose: sglang-fleet's preflight (plugins/module_utils/mtp.py, via
model_facts.describe) and the simulator's own reading of SGLang's draft-head loaders (simulator/.../mtp.py, via
load_model). Each checkpoint the tests know, recorded or generated, is read by both and they must agree, so a wrong
rule on either side fails here instead of agreeing with itself by construction.

Checkpoints: the production model's recorded config and index (tests/fixtures/models), every model a hardware
recording listed (models/listing.json: the checkpoints real SGLang 0.5.17 loaded), the generated test repository
(tests/fixtures/model_repo.py), the simulator tests' checkpoint (simkit.make_model) and, of each, the copy without its
`mtp.*` tensors that the integration tests make (test_preflight.py MAKE_MODEL_VARIANT drop_mtp).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.fleet.plugins.module_utils.model_facts import describe
from fixtures import model_repo
from sglang_simulator.model import load_model
from simulator.simkit import make_model

ROOT = Path(__file__).resolve().parents[2]


def recorded() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """name -> (config.json, model.safetensors.index.json) of every recorded checkpoint."""
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for directory in sorted((ROOT / "tests/fixtures/models").iterdir()):
        found[f"fixture:{directory.name}"] = (
            json.loads((directory / "config.json").read_text()),
            json.loads((directory / "model.safetensors.index.json").read_text()),
        )
    for listing in sorted((ROOT / "tests/recordings").glob("*/models/listing.json")):
        for name, files in json.loads(listing.read_text()).items():
            found[f"{listing.parts[-3]}:{name}"] = (
                json.loads(files["config.json"]),
                json.loads(files["model.safetensors.index.json"]),
            )
    names = {name: shard for shard, tensors in model_repo.layout().items() for name in tensors}
    found["generated:model_repo"] = (model_repo.config(), {"metadata": {"total_size": 1}, "weight_map": names})
    return found


def without_mtp(config: dict[str, Any], index: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The integration tests' variant: the `mtp.*` tensors dropped and the config's MTP layers set to 0."""
    weight_map = {name: shard for name, shard in index["weight_map"].items() if not name.startswith("mtp.")}
    config = json.loads(json.dumps(config))
    if "mtp_num_hidden_layers" in config.get("text_config", {}):
        config["text_config"]["mtp_num_hidden_layers"] = 0
    return config, {**index, "weight_map": weight_map}


CHECKPOINTS = recorded()
VARIANTS = {f"{name} without mtp.*": without_mtp(*files) for name, files in CHECKPOINTS.items()}


def both_rules(directory: Path) -> tuple[bool, bool | None]:
    return describe(str(directory), {})["has_mtp_tensors"], load_model(str(directory)).has_mtp_weights()


def test_the_checkpoints_cover_both_answers_and_the_recorded_heads() -> None:
    """The corpus is not thin: recorded MiMo with and without its MTP layer, Qwen3 (no head) and Qwen3.5's mtp.*."""
    assert {"fixture:Qwen3.6-27B", "generated:model_repo"} <= set(CHECKPOINTS)
    recorded_names = {name.split(":", 1)[1] for name in CHECKPOINTS}
    assert {"tiny-mimo-mtp", "tiny-mimo-no-mtp", "tiny-qwen3", "tiny-qwen3.5"} <= recorded_names


@pytest.mark.parametrize("name", sorted({**CHECKPOINTS, **VARIANTS}))
def test_the_products_rule_and_the_simulators_agree(name: str, tmp_path: Path) -> None:
    config, index = {**CHECKPOINTS, **VARIANTS}[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    product, simulator = both_rules(tmp_path)
    assert simulator is not None
    assert product == simulator, f"{name}: preflight says {product}, the simulator's head loader {simulator}"


@pytest.mark.parametrize(
    ("name", "has_draft_layer"),
    [("tiny-mimo-mtp", True), ("tiny-mimo-no-mtp", False), ("tiny-qwen3.5", True), ("tiny-qwen3", False)],
)
def test_both_say_what_the_recorded_checkpoint_holds(name: str, has_draft_layer: bool, tmp_path: Path) -> None:
    """Real SGLang 0.5.17 loaded MiMoMTP's layer from tiny-mimo-mtp and nothing from tiny-mimo-no-mtp
    (test_nextn_without_mtp.py); tiny-qwen3.5 carries Qwen3.5's mtp.* layer."""
    config, index = next(files for key, files in CHECKPOINTS.items() if key.endswith(f":{name}"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert both_rules(tmp_path) == (has_draft_layer, has_draft_layer)


@pytest.mark.parametrize("mtp", [True, False])
def test_the_simulator_tests_checkpoint_is_read_alike(mtp: bool, tmp_path: Path) -> None:
    directory = make_model(tmp_path / "model", mtp=mtp, total_size=1 << 20)
    assert both_rules(directory) == (mtp, mtp)
