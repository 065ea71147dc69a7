"""Token estimates for a language model's prompt, and packing chunks into a token budget.

The composer cannot run the tokenizer of whichever model ``llm.chat`` reaches,
so it estimates on the high side for the byte-pair vocabularies chat models use
(one regex pass, additive over pieces):

* a run of Latin letters of length ``L`` costs ``1 + (L - 1) // 4``, plus 1 per
  non-ASCII letter (accents often fall outside whole-word entries);
* a digit costs 1 (several tokenizers split numbers digit by digit);
* a CJK, kana or Hangul character costs 2 (byte-level fallback for rarer ones);
* a letter of another script, and any other non-space character, costs 1;
* a run of line breaks costs 1.

Pure functions only; property-tested in ``tests/unit/test_answer_budget.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["MESSAGE_OVERHEAD", "context_room", "estimate_tokens", "pack"]

T = TypeVar("T")

MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around one message (role markers, separators), estimated high."""

_WIDE = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_LATIN = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\ufb00-\ufb06"
_PATTERN = re.compile(rf"(?P<latin>[{_LATIN}]+)|(?P<wide>[{_WIDE}])|(?P<newline>\n+)|(?P<other>[^\s{_WIDE}])")


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text`` for a chat model (see the module docstring)."""
    total = 0
    for m in _PATTERN.finditer(text):
        kind = m.lastgroup
        if kind == "latin":
            word = m.group()
            total += 1 + (len(word) - 1) // 4 + sum(1 for c in word if c > "\x7f")
        elif kind == "wide":
            total += 2
        else:  # a newline run, a digit, punctuation, a letter of another script
            total += 1
    return total


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
