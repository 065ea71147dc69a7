"""``POST /v1/completions``: OpenAI's legacy text completion, for clients that default to it
(LlamaIndex's ``OpenAILike`` unless told it talks to a chat model).

The prompt is asked of the chat model as one user message through the chat route's own path
(``llm.chat``), and the answer (or each streamed chunk) is reshaped as a ``text_completion``.
What only a completion model can do (``echo``, ``suffix``, ``logprobs``, ``best_of``, several
prompts or choices) is refused with a message that names ``/v1/chat/completions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hearthnet.errors import BadRequest

__all__ = ["chat_body", "text_completion"]

_PASSED: Final = frozenset(
    {"model", "stream", "stream_options", "max_tokens", "temperature", "stop", "top_p", "user", "seed"}
)
_CHAT_ONLY = "this node serves chat models: use POST /v1/chat/completions"


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request a completion request stands for (``bad_request`` naming the field)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest(f"prompt must be one non-empty string ({_CHAT_ONLY} for more)")
    for key, plain in (("echo", False), ("suffix", None), ("logprobs", None), ("best_of", 1), ("n", 1)):
        if key in body and body[key] not in (plain, None):
            raise BadRequest(f"{key} is not supported: {_CHAT_ONLY}")
    unknown = sorted(
        str(k)[:40]
        for k in body
        if k not in _PASSED
        and k
        not in (
            "prompt",
            "echo",
            "suffix",
            "logprobs",
            "best_of",
            "n",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
        )
    )
    if unknown:
        raise BadRequest(f"unrecognized request argument(s): {', '.join(unknown[:8])}")
    chat = {k: body[k] for k in _PASSED if k in body and body[k] is not None}
    chat["messages"] = [{"role": "user", "content": prompt}]
    return chat


def text_completion(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` or ``chat.completion.chunk`` as a ``text_completion`` (an error
    event passes unchanged)."""
    if "error" in doc:
        return dict(doc)
    choices = []
    for choice in doc.get("choices") or []:
        part = choice.get("message") or choice.get("delta") or {}
        choices.append(
            {
                "text": part.get("content") or "",
                "index": choice.get("index", 0),
                "logprobs": None,
                "finish_reason": choice.get("finish_reason"),
            }
        )
    out: dict[str, Any] = {
        "id": "cmpl-" + str(doc.get("id", "")).removeprefix("chatcmpl-"),
        "object": "text_completion",
        "created": doc.get("created"),
        "model": doc.get("model"),
        "choices": choices,
        "system_fingerprint": None,
    }
    if "usage" in doc:
        out["usage"] = doc["usage"]
    return out
