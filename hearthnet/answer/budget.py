"""Token estimates for a language model's prompt, and packing chunks into a token budget.

The composer cannot run the tokenizer of whichever model ``llm.chat`` reaches,
so it estimates with the same rules as ``llm.chat``'s own window check (which
refuses a prompt whose estimate and ``max_tokens`` exceed the model's window),
erring high for current BPE/SentencePiece vocabularies:

* a run of Latin letters of length ``L`` costs ``1 + (L - 1) // 4``, plus 1 if
  ``L >= 8``, plus 1 per non-ASCII letter, plus 1 if a capital follows its first letter;
* a digit costs 1, and 1 more for a space or tab before it;
* a run of Greek ... Ethiopic letters costs one per two characters;
* a character outside the Basic Multilingual Plane costs 2;
* any other non-space character (punctuation, CJK, kana, Hangul) costs 1;
* a newline costs 1, a run of two or more spaces or tabs costs 1;
* each message costs ``MESSAGE_OVERHEAD`` more and the reply's opening ``REPLY_OVERHEAD``.

The composer may not import the LLM service, so the rules are written here
too; ``tests/unit/test_answer_budget.py`` checks that both agree.  Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

__all__ = ["MESSAGE_OVERHEAD", "REPLY_OVERHEAD", "context_room", "estimate_prompt", "estimate_tokens", "pack"]

T = TypeVar("T")

MESSAGE_OVERHEAD = 6
"""Tokens a chat template adds around one message (role markers, separators)."""
REPLY_OVERHEAD = 4

_LATIN = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\ufb00-\ufb06"
_PATTERN = re.compile(
    rf"(?P<latin>[{_LATIN}]+)|(?P<newline>\n)|(?P<spaces>[ \t]{{2,}})|(?P<digit>[ \t]?[0-9])"
    r"|(?P<alpha>[\u0370-\u1dff\u1f00-\u1fff]+)|(?P<astral>[\U00010000-\U0010ffff])|(?P<space>\s)|(?P<other>.)",
    re.DOTALL,
)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` takes at most in a current LLM tokenizer (see the module docstring)."""
    total = 0
    for m in _PATTERN.finditer(text):
        kind = m.lastgroup
        if kind == "latin":
            n = m.end() - m.start()
            word = m.group()
            total += 1 + (n - 1) // 4 + (n >= 8) + sum(1 for c in word if c > "\x7f")
            total += any(c.isupper() for c in word[1:])  # CamelCase and CAPITALS split more
        elif kind == "space":
            continue
        elif kind == "alpha":
            total += (m.end() - m.start() + 1) // 2
        elif kind == "astral":
            total += 2
        elif kind == "digit":
            total += m.end() - m.start()
        else:  # a newline, a run of spaces, any other character
            total += 1
    return total


def estimate_prompt(messages: Iterable[dict[str, str]]) -> int:
    """Tokens a chat prompt takes, template included (what ``llm.chat`` checks against its window)."""
    return REPLY_OVERHEAD + sum(MESSAGE_OVERHEAD + estimate_tokens(m["content"]) for m in messages)


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
