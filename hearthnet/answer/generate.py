"""The generated answer: ``llm.chat``'s deltas streamed to the citation check as they come."""

from __future__ import annotations

import time
from typing import Any

from hearthnet.answer.frames import Say
from hearthnet.answer.prompt import messages
from hearthnet.answer.selection import Selection
from hearthnet.bus.api import BusAPI
from hearthnet.errors import BusError

__all__ = ["MAX_ANSWER_CHARS", "NoToken", "generate"]

MAX_ANSWER_CHARS = 200_000
"""Most characters of generated text kept from one ``llm.chat`` stream (a provider that never stops)."""


class NoToken(Exception):
    """``llm.chat`` failed before its first token (``code`` is its wire code)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


async def generate(
    bus: BusAPI,
    model: str,
    selection: Selection,
    question: str,
    max_tokens: int,
    temperature: float,
    say: Say,
    timeout: float,
) -> tuple[float | None, dict[str, Any] | None]:
    """Stream ``llm.chat``'s deltas to ``say`` (which checks their citations); when its first
    token came, and the model's ``usage``.

    A failure before the first token raises :class:`NoToken` (the caller
    falls back to an extractive answer); after it, the ``BusError`` itself.
    """
    size = 0
    first: float | None = None
    try:
        async with bus.stream(
            "llm.chat",
            (1, 0),
            params={"model": model},
            input={
                "messages": messages(selection.system, selection.history, question),
                "max_tokens": max_tokens,
                "temperature": temperature,
            },
            timeout=timeout,
        ) as call:
            await call.end_input()
            async for frame in call.frames():
                delta = frame.get("delta")
                if not isinstance(delta, str) or not delta or size >= MAX_ANSWER_CHARS:
                    continue
                delta = delta[: MAX_ANSWER_CHARS - size]
                if first is None:
                    first = time.perf_counter()
                size += len(delta)
                await say(delta)
            result = await call.result()
    except BusError as exc:
        if first is None:
            raise NoToken(exc.code) from exc
        raise
    message = result.output.get("message")
    content = message.get("content") if isinstance(message, dict) else message
    usage = result.output.get("usage")
    usage = dict(usage) if isinstance(usage, dict) else None
    if first is None and isinstance(content, str) and content:
        await say(content[:MAX_ANSWER_CHARS])  # a provider that answered without streaming
        return time.perf_counter(), usage
    return first, usage
