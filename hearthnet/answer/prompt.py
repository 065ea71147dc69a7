"""The prompt: system instructions with the document context, the kept history, the question.

The context is one line per chunk, ``- From {file}#{chunk_id} (page N): "…"``
by default (``[answer] context_line``), the chunk's whitespace collapsed.  With
no retrieval (skipped, or asked without it) the plain ``no_context_prompt`` is
the system message, so a greeting gets a greeting, not "not in the documents".
Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hearthnet.answer.hits import Hit
from hearthnet.config import AnswerConfig
from hearthnet.contracts.llm import MESSAGE_OVERHEAD, estimate_tokens

__all__ = ["Turn", "context_head", "context_line", "history_messages", "messages", "system_text"]

Message = dict[str, str]


@dataclass(frozen=True)
class Turn:
    """An earlier question and answer of the session."""

    question: str
    answer: str


def context_line(template: str, hit: Hit) -> str:
    """One chunk as the prompt shows it."""
    return template.format(
        file=hit.file,
        chunk_id=hit.chunk_id,
        page=hit.page if hit.page is not None else "?",
        place=hit.place or "page ?",
        text=" ".join(hit.text.split()),
        title=" ".join(hit.title.split()),
        corpus=hit.corpus,
    )


def context_head(config: AnswerConfig) -> str:
    """What the system message holds before its first context line (joined to it by a newline)."""
    return f"{config.system_prompt}\n\n{config.context_header}"


def system_text(config: AnswerConfig, context: Sequence[str] | None) -> str:
    """The system message: the RAG instructions and context lines, or the plain prompt (``None``)."""
    if context is None:
        return config.no_context_prompt
    body = "\n".join(context) if context else "(no document matched the question)"
    return f"{context_head(config)}\n{body}"


def history_messages(turns: Sequence[Turn], budget: int) -> tuple[list[Message], int]:
    """The newest turns whose messages fit ``budget`` tokens, oldest first, and their cost."""
    kept: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        cost = estimate_tokens(turn.question) + estimate_tokens(turn.answer) + 2 * MESSAGE_OVERHEAD
        if used + cost > budget:
            break
        kept.append(turn)
        used += cost
    out: list[Message] = []
    for turn in reversed(kept):
        out.append({"role": "user", "content": turn.question})
        out.append({"role": "assistant", "content": turn.answer})
    return out, used


def messages(system: str, history: Sequence[Message], question: str) -> list[Message]:
    """``llm.chat``'s messages: system (with the context), the kept history, the question."""
    return [{"role": "system", "content": system}, *history, {"role": "user", "content": question}]
