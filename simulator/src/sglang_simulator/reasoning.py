"""``--reasoning-parser``: how real SGLang 0.5.17 splits a chat reply into reasoning and content.

Imitated: the parsers built on ``Qwen3Detector`` (``<think>`` ... ``</think>``; srt/parser/reasoning_parser.py
``ReasoningParser.DetectorMap``) that the fleet serves with, ``qwen3`` and ``qwen3-thinking``. Any other
parser leaves the reply all content, as no parser does.

* Thinking mode (srt/entrypoints/openai/serving_chat.py ``_get_reasoning_from_request``): on unless the
  request's ``chat_template_kwargs`` (over ``--default-chat-template-kwargs``) set ``enable_thinking`` to
  false -- the detector's ``reasoning_default="enable_thinking"``, and what Qwen's templates default to.
  The scheduler then counts reasoning tokens up to ``</think>`` (managers/schedule_batch.py
  ``update_reasoning_tokens``).
* The split (``separate_reasoning``, default true): in thinking mode, or always with ``qwen3-thinking``
  (``ReasoningParser`` forces it), the reply is reasoning up to ``</think>`` and content after it.

The simulated model never writes ``</think>``: a thinking reply is all reasoning, every token of it (the EOS
too) a reasoning token, and its content "" -- as real SGLang answered for a model whose chat template ends
the prompt with ``<think>\\n`` (tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/b200).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Parser name -> whether ReasoningParser forces the split even without thinking mode.
_QWEN3_PARSERS = {"qwen3": False, "qwen3-thinking": True}


@dataclass(frozen=True)
class ChatReasoning:
    """What the reasoning parser does to one chat completion."""

    thinking: bool  # thinking mode: every token of the reply is a reasoning token
    split: bool  # the reply goes to reasoning_content (all of it), content is ""

    def reasoning_tokens(self, completion_tokens: int) -> int:
        return completion_tokens if self.thinking else 0


def chat_reasoning(settings: Mapping[str, Any], request: Mapping[str, Any]) -> ChatReasoning:
    parser = settings.get("reasoning_parser")
    if not isinstance(parser, str) or parser.lower() not in _QWEN3_PARSERS:
        return ChatReasoning(thinking=False, split=False)
    defaults = settings.get("default_chat_template_kwargs")
    kwargs = dict(defaults) if isinstance(defaults, Mapping) else {}
    requested = request.get("chat_template_kwargs")
    if isinstance(requested, Mapping):
        kwargs.update(requested)
    thinking = kwargs.get("enable_thinking") is not False
    separate = request.get("separate_reasoning") is not False
    return ChatReasoning(thinking, split=separate and (thinking or _QWEN3_PARSERS[parser.lower()]))
