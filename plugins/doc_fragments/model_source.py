"""Options the model source's action plugins share (sglang_model_fetch, sglang_model_lock)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  endpoint:
    description: The Hub's address, for a mirror or a Hugging Face-compatible server; empty for huggingface_hub's default.
    type: str
    default: ""
  token:
    description: A Hub token for a private or gated repository; empty for huggingface_hub's own (HF_TOKEN or a login).
    type: str
    default: ""
"""
