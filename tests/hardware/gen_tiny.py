"""Write a tiny random-weight Hugging Face model directory, offline (no downloads, no torch).

Needs numpy, safetensors, tokenizers and transformers (for the config and tokenizer classes). Tensor names are the
classic HF layout SGLang's loaders read; a `model.safetensors.index.json` lists every tensor, as real checkpoints do.

  python gen_tiny.py ARCH OUT [ARCH OUT ...]

  qwen3 OUT                              Qwen3ForCausalLM: hidden 256, intermediate 512, 2 layers, 4 heads,
                                         2 KV heads, head_dim 64, vocab 1024, tied embeddings
  mimo_mtp_agree OUT                     MiMoForCausalLM (qwen2 config) of the same shape plus one MTP layer
                                         (`model.mtp_layers.0.*`); o_proj and down_proj are zero everywhere and the
                                         MTP input_proj is [0 | I], so the MTP draft computes the target's greedy next
                                         token: under temperature 0 every draft token is accepted (accept length 4.0
                                         with 3 steps); at temperature 1.0 the draft mostly fails
  mimo_no_mtp OUT                        the same MiMoForCausalLM target (same weights) WITHOUT its MTP layer: no
                                         `model.mtp_layers.*` tensors, no `num_nextn_predict_layers` in config.json
                                         (a MiMo-style checkpoint that lost its MTP layer)

Random fp16 weights (seed 0), config dtype bfloat16. The tokenizer is a 512-token byte-level BPE trained in-process
with a ChatML chat template.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
from safetensors.numpy import save_file  # type: ignore[import-not-found, unused-ignore]
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found, unused-ignore]

Tensors = dict[str, Any]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB = 1024  # >= the tokenizer's 512; padded like real checkpoints
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 256, 512, 2, 4, 2, 64
ARCHES = ("qwen3", "mimo_mtp_agree", "mimo_no_mtp")


class Weights:
    def __init__(self, agree: bool, qk_norm: bool, bias: bool) -> None:
        self.rng = np.random.default_rng(0)
        self.agree, self.qk_norm, self.bias = agree, qk_norm, bias

    def normal(self, *shape: int) -> Any:
        return (self.rng.standard_normal(shape) * 0.02).astype(np.float16)

    @staticmethod
    def ones(n: int) -> Any:
        return np.ones(n, np.float16)

    @staticmethod
    def zeros(*shape: int) -> Any:
        return np.zeros(shape, np.float16)

    def attention(self, prefix: str) -> Tensors:
        t: Tensors = {
            f"{prefix}.q_proj.weight": self.normal(HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.k_proj.weight": self.normal(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.v_proj.weight": self.normal(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.o_proj.weight": self.normal(HIDDEN, HEADS * HEAD_DIM),
        }
        if self.qk_norm:
            t[f"{prefix}.q_norm.weight"] = self.ones(HEAD_DIM)
            t[f"{prefix}.k_norm.weight"] = self.ones(HEAD_DIM)
        if self.bias:
            t[f"{prefix}.q_proj.bias"] = self.zeros(HEADS * HEAD_DIM)
            t[f"{prefix}.k_proj.bias"] = self.zeros(KV_HEADS * HEAD_DIM)
            t[f"{prefix}.v_proj.bias"] = self.zeros(KV_HEADS * HEAD_DIM)
        return t

    def layer(self, prefix: str, bias: bool | None = None, qk_norm: bool | None = None) -> Tensors:
        saved = self.bias, self.qk_norm
        self.bias = saved[0] if bias is None else bias
        self.qk_norm = saved[1] if qk_norm is None else qk_norm
        t: Tensors = {f"{prefix}.input_layernorm.weight": self.ones(HIDDEN),
                      f"{prefix}.post_attention_layernorm.weight": self.ones(HIDDEN)}
        t.update(self.attention(f"{prefix}.self_attn"))
        t.update({
            f"{prefix}.mlp.gate_proj.weight": self.normal(INTER, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": self.normal(INTER, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": self.normal(HIDDEN, INTER),
        })
        if self.agree:  # every layer adds nothing to the residual stream
            t[f"{prefix}.self_attn.o_proj.weight"] = self.zeros(HIDDEN, HEADS * HEAD_DIM)
            t[f"{prefix}.mlp.down_proj.weight"] = self.zeros(HIDDEN, INTER)
        self.bias, self.qk_norm = saved
        return t


def write_tokenizer(out: str) -> Tokenizer:
    from transformers import PreTrainedTokenizerFast  # type: ignore[import-not-found, unused-ignore]

    corpus = [f"The quick brown fox {i} jumps over the lazy dog. Hello world, SGLang serves tokens." for i in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                     bos_token=None, unk_token=None)
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)
    return tok


def write_config(arch: str, out: str, tok: Tokenizer) -> None:
    from transformers import Qwen2Config, Qwen3Config  # type: ignore[import-not-found, unused-ignore]

    common: dict[str, Any] = dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=True, eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"),
    )
    if arch == "qwen3":
        cfg: Any = Qwen3Config(head_dim=HEAD_DIM, architectures=["Qwen3ForCausalLM"], **common)
    else:
        cfg = Qwen2Config(architectures=["MiMoForCausalLM"], **common)  # head_dim = hidden / heads = 64
        if arch == "mimo_mtp_agree":
            cfg.num_nextn_predict_layers = 1
    cfg.dtype = "bfloat16"
    cfg.save_pretrained(out)


def write_weights(arch: str, out: str) -> None:
    mimo = arch in ("mimo_mtp_agree", "mimo_no_mtp")
    w = Weights(agree=mimo, qk_norm=not mimo, bias=mimo)
    main: Tensors = {"model.embed_tokens.weight": w.normal(VOCAB, HIDDEN), "model.norm.weight": w.ones(HIDDEN)}
    for i in range(LAYERS):
        main.update(w.layer(f"model.layers.{i}"))
    files = {"model.safetensors": main}
    if arch == "mimo_mtp_agree":  # MiMoMTP.load_weights reads model.mtp_layers.0.* (as model.mtp_block.*)
        p = "model.mtp_layers.0"
        identity = np.concatenate([np.zeros((HIDDEN, HIDDEN)), np.eye(HIDDEN)], 1).astype(np.float16)
        mtp: Tensors = {
            f"{p}.token_layernorm.weight": w.ones(HIDDEN),
            f"{p}.hidden_layernorm.weight": w.ones(HIDDEN),
            f"{p}.input_proj.weight": identity,
            f"{p}.final_layernorm.weight": w.ones(HIDDEN),
        }
        mtp.update(w.layer(p, bias=True, qk_norm=False))
        files["mtp.safetensors"] = mtp
    weight_map: dict[str, str] = {}
    total = 0
    for name, tensors in files.items():
        save_file(tensors, os.path.join(out, name), metadata={"format": "pt"})
        for key, value in tensors.items():
            weight_map[key] = name
            total += int(value.nbytes)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w", encoding="utf-8") as handle:
        json.dump(index, handle, indent=2)


def generate(arch: str, out: str) -> list[str]:
    if arch not in ARCHES:
        raise SystemExit(f"unknown arch {arch!r}; one of {', '.join(ARCHES)}")
    os.makedirs(out, exist_ok=True)
    tok = write_tokenizer(out)
    write_config(arch, out, tok)
    write_weights(arch, out)
    return sorted(os.listdir(out))


def main(argv: list[str]) -> int:
    """ARCH OUT [ARCH OUT ...]: several models in one process (transformers is imported once)."""
    pairs = argv[1:]
    if not pairs or len(pairs) % 2:
        print(__doc__)
        return 2
    for arch, out in zip(pairs[::2], pairs[1::2], strict=True):
        print("wrote", out, generate(arch, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
