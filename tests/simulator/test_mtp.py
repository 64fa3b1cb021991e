"""The simulator's reading of SGLang 0.5.23's draft-head loaders (sglang_simulator/mtp.py), head by head."""

from __future__ import annotations

import pytest

from sglang_simulator.mtp import has_head_tensors, head_takes


@pytest.mark.parametrize(
    ("architecture", "name", "layers", "taken"),
    [
        # Qwen3_5ForCausalLMMTP.load_weights: `if "mtp" not in name: continue`
        ("Qwen3_5ForConditionalGeneration", "mtp.fc.weight", 64, True),
        ("Qwen3_5ForConditionalGeneration", "model.language_model.mtp.layers.0.mlp.weight", 64, True),
        ("Qwen3_5MoeForCausalLM", "model.layers.0.mtp_gate", 64, True),
        ("Qwen3_5ForConditionalGeneration", "model.language_model.layers.64.mlp.weight", 64, False),
        # MiMoMTP: re.match(r"model.mtp_layers.(\d+).", name)
        ("MiMoForCausalLM", "model.mtp_layers.0.input_proj.weight", 2, True),
        ("MiMoForCausalLM", "mtp.fc.weight", 2, False),
        ("MiMoForCausalLM", "model.layers.2.mlp.weight", 2, False),
        # MiMoV2MTP: re.match(r"model.mtp.layers.(\d+).", name)
        ("MiMoV2FlashForCausalLM", "model.mtp.layers.0.enorm.weight", 48, True),
        (
            "MiMoV2FlashForCausalLM",
            "model.mtp_layers.0.enorm.weight",
            48,
            True,
        ),  # its "." matches any character
        ("MiMoV2FlashForCausalLM", "mtp.layers.0.enorm.weight", 48, False),
        # DeepSeek's NextN: the layer after the decoder's, model.layers.<num_hidden_layers>
        ("DeepseekV3ForCausalLM", "model.layers.61.eh_proj.weight", 61, True),
        ("DeepseekV3ForCausalLM", "model.layers.60.mlp.weight", 61, False),
        ("DeepseekV3ForCausalLM", "mtp.fc.weight", 61, False),
        # a head this file has no loader of its own for: any of them
        ("Glm4MoeForCausalLM", "model.layers.46.eh_proj.weight", 46, True),
        ("Glm4MoeForCausalLM", "mtp.fc.weight", 46, True),
        ("Glm4MoeForCausalLM", "model.layers.45.mlp.weight", 46, False),
    ],
)
def test_each_head_takes_its_own_tensors(architecture: str, name: str, layers: int, taken: bool) -> None:
    assert head_takes(architecture, name, layers) is taken


def test_a_checkpoint_without_the_heads_tensors_leaves_it_untrained() -> None:
    names = ["model.embed_tokens.weight", "model.layers.0.mlp.weight", "model.layers.1.mlp.weight"]
    assert not has_head_tensors("MiMoForCausalLM", names, 2)
    assert has_head_tensors("MiMoForCausalLM", [*names, "model.mtp_layers.0.mtp_block.weight"], 2)
