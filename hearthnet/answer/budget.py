"""Packing chunks into a prompt's token budget (pure functions).

Tokens are estimated with :func:`hearthnet.contracts.llm.estimate_tokens`, the rules
``llm.chat``'s own window check uses (it refuses a prompt whose estimate and ``max_tokens``
exceed the model's window), so what the composer packs is what the model's node accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["context_room", "pack"]

T = TypeVar("T")


def context_room(
    *,
    token_budget: int,
    context_tokens: int | None,
    fixed_tokens: int,
    max_tokens: int,
) -> int:
    """Tokens left for document context: the budget, never more than the model's window allows.

    ``fixed_tokens`` is everything else in the prompt (system prompt, kept
    history, question, template overhead); ``max_tokens`` is kept for the answer.
    """
    room = token_budget
    if context_tokens is not None:
        room = min(room, context_tokens - fixed_tokens - max_tokens)
    return max(0, room)


def pack(items: Sequence[T], *, budget: int, max_items: int, cost: Callable[[T], int]) -> tuple[list[T], int]:
    """The longest prefix of ``items`` (rank order) whose costs sum to at most ``budget``.

    Stops at the first item that does not fit, so a lower-ranked chunk never
    displaces a higher-ranked one; at most ``max_items``.  Returns the kept
    items and their total cost.
    """
    kept: list[T] = []
    used = 0
    for item in items[: max(0, max_items)]:
        c = cost(item)
        if used + c > budget:
            break
        kept.append(item)
        used += c
    return kept, used
