"""The ``llm.chat@1.0`` contract: input shape, limits and the checked request.

Pure code (no I/O): the service validates every call with :func:`validate_chat_input`
before any backend is asked, and callers may use the same function to check a
request before sending it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.errors import BadRequest

__all__ = [
    "CAPABILITY",
    "MAX_MESSAGES",
    "MAX_STOP",
    "MAX_STOP_CHARS",
    "MAX_TOTAL_CHARS",
    "ROLES",
    "VERSION",
    "ChatRequest",
    "validate_chat_input",
]

CAPABILITY = "llm.chat"
VERSION = (1, 0)
ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 256
MAX_TOTAL_CHARS = 400_000
"""Characters of content over all messages (a 128k-token window holds ~400-500k characters)."""
MAX_STOP = 4
MAX_STOP_CHARS = 64
MAX_TEMPERATURE = 2.0
_INPUT_KEYS = frozenset({"messages", "max_tokens", "temperature", "stop"})


@dataclass(frozen=True)
class ChatRequest:
    """A checked ``llm.chat`` input: ``max_tokens`` None means the model's ``max_output_tokens``."""

    messages: tuple[tuple[str, str], ...]
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()

    @property
    def chars(self) -> int:
        return sum(len(content) for _, content in self.messages)


def validate_chat_input(input: Mapping[str, Any], *, max_output_tokens: int | None = None) -> ChatRequest:
    """``input`` -> a :class:`ChatRequest`, or ``BadRequest`` saying what is wrong.

    ``max_output_tokens`` (the model's) bounds ``max_tokens`` when given.
    """
    if not isinstance(input, Mapping):
        raise BadRequest("llm.chat input must be a map {messages, max_tokens?, temperature?, stop?}")
    unknown = sorted(str(k)[:40] for k in input if k not in _INPUT_KEYS)
    if unknown:
        raise BadRequest(f"unknown llm.chat input field(s): {', '.join(unknown[:8])}")
    messages = _messages(input.get("messages"))
    return ChatRequest(
        messages=messages,
        max_tokens=_max_tokens(input.get("max_tokens"), max_output_tokens),
        temperature=_temperature(input.get("temperature")),
        stop=_stop(input.get("stop")),
    )


def _messages(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list | tuple) or not raw:
        raise BadRequest(
            "input.messages must be a non-empty list of {role: system|user|assistant, content: string}"
        )
    if len(raw) > MAX_MESSAGES:
        raise BadRequest(f"input.messages holds {len(raw)} messages; the limit is {MAX_MESSAGES}")
    out: list[tuple[str, str]] = []
    total = 0
    for i, msg in enumerate(raw):
        if not isinstance(msg, Mapping):
            raise BadRequest(f"input.messages[{i}] must be a map {{role, content}}")
        extra = sorted(str(k)[:40] for k in msg if k not in ("role", "content"))
        if extra:
            raise BadRequest(f"input.messages[{i}] has unknown field(s): {', '.join(extra[:8])}")
        role, content = msg.get("role"), msg.get("content")
        if role not in ROLES:
            shown = repr(role)[:40] if isinstance(role, str) else type(role).__name__
            raise BadRequest(f"input.messages[{i}].role must be system, user or assistant, got {shown}")
        if not isinstance(content, str):
            raise BadRequest(f"input.messages[{i}].content must be a string, got {type(content).__name__}")
        total += len(content)
        if total > MAX_TOTAL_CHARS:
            raise BadRequest(
                f"input.messages hold more than {MAX_TOTAL_CHARS} characters of content; send less context"
            )
        out.append((role, content))
    if all(role == "system" for role, _ in out):
        raise BadRequest("input.messages needs at least one user or assistant message")
    return tuple(out)


def _max_tokens(raw: Any, limit: int | None) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise BadRequest(f"input.max_tokens must be a positive integer, got {raw!r:.40}")
    if limit is not None and raw > limit:
        raise BadRequest(f"input.max_tokens is {raw}; this model writes at most {limit} tokens per answer")
    return raw


def _temperature(raw: Any) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise BadRequest(f"input.temperature must be a number from 0 to {MAX_TEMPERATURE:g}")
    if not 0 <= raw <= MAX_TEMPERATURE:
        raise BadRequest(f"input.temperature must be from 0 to {MAX_TEMPERATURE:g}, got {raw:g}")
    return float(raw)


def _stop(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or len(items) > MAX_STOP:
        raise BadRequest(f"input.stop must be a string or a list of at most {MAX_STOP} strings")
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s:
            raise BadRequest(f"input.stop[{i}] must be a non-empty string")
        if len(s) > MAX_STOP_CHARS:
            raise BadRequest(f"input.stop[{i}] has {len(s)} characters; the limit is {MAX_STOP_CHARS}")
    return tuple(items)
