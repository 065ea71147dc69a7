"""A conservative estimate of how many tokens a prompt takes in an unknown LLM's window.

A remote model's tokenizer is not available here, so the window check
(``prompt + max_tokens <= context_tokens``) counts with rules that err high
for the tokenizers of current open and hosted models (SentencePiece/BPE with
32k-262k entries: Llama, Mistral, Gemma, Qwen, GPT-4-class). One regex pass:

* a run of Latin letters of length ``L`` costs ``1 + (L - 1) // 4``, plus 1 if
  ``L >= 8``, plus 1 per non-ASCII letter, plus 1 if a capital follows its first
  letter (a common word is one token; a rare long one, an abbreviation or a
  CamelCase name splits into several);
* every digit costs 1 (Llama, Gemma, Mistral and Qwen split numbers into digits),
  and so does a space before a digit (SentencePiece keeps it as a token of its own);
* a run of letters of the alphabets between Greek and Ethiopic (Greek, Cyrillic,
  Armenian, Hebrew, Arabic, Indic, Thai, Georgian ...) costs one per two characters;
* a character outside the Basic Multilingual Plane (emoji, rare ideographs) costs 2;
* every other non-space character (punctuation, symbols, CJK, kana, Hangul) costs 1;
* a newline costs 1, a run of two or more spaces or tabs costs 1;
* every message costs 6 more (the chat template's role markers), and the
  reply's opening costs 4.

Scripts that a 32k-vocabulary model encodes byte by byte (Thai or Devanagari on
Llama 2) can take more than this: the server's own refusal then answers.
Calibration figures are in ``specs/llm.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MESSAGE_OVERHEAD", "REPLY_OVERHEAD", "estimate_prompt_tokens", "estimate_tokens"]

MESSAGE_OVERHEAD = 6
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
            word = m.group()
            n = len(word)
            total += 1 + (n - 1) // 4 + (n >= 8) + sum(1 for c in word if c > "\x7f")
            total += any(c.isupper() for c in word[1:])  # CamelCase and CAPITALS split more
        elif kind == "space":
            continue
        elif kind == "alpha":
            total += (m.end() - m.start() + 1) // 2
        elif kind == "astral":
            total += 2
        elif kind == "digit":
            total += m.end() - m.start()  # a space before a digit is a token of its own
        else:  # newline, a run of spaces, a digit, any other character
            total += 1
    return total


def estimate_prompt_tokens(messages: Iterable[tuple[str, str]]) -> int:
    """Tokens a chat prompt of ``(role, content)`` messages takes, template included."""
    return REPLY_OVERHEAD + sum(MESSAGE_OVERHEAD + estimate_tokens(content) for _, content in messages)
