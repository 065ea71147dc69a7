"""The ``llm.chat@1.0`` contract: input shape, limits, the checked request, and the token estimate
that both the service's window check and the composer's prompt budget use.

Pure code (no I/O): the service validates every call with :func:`validate_chat_input`
before any backend is asked, and callers may use the same function to check a
request before sending it.  A provider's params ``{model, context_tokens,
max_output_tokens}`` name its model and advertise its window; calls choose by model.

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
* every message costs ``MESSAGE_OVERHEAD`` more (the chat template's role markers), and
  the reply's opening ``REPLY_OVERHEAD``.

Scripts that a 32k-vocabulary model encodes byte by byte (Thai or Devanagari on
Llama 2) can take more than this: the server's own refusal then answers.
Calibration figures are in ``specs/llm.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals
from hearthnet.contracts.base import Caller, Streamed, check_input_keys, opened, streamed_result, streamer
from hearthnet.errors import BadRequest

__all__ = [
    "CAPABILITY",
    "MAX_MESSAGES",
    "MAX_STOP",
    "MAX_STOP_CHARS",
    "MAX_TOTAL_CHARS",
    "MESSAGE_OVERHEAD",
    "PREDICATE",
    "PREDICATES",
    "REPLY_OVERHEAD",
    "ROLES",
    "VERSION",
    "ChatRequest",
    "LlmClient",
    "chat_input",
    "estimate_prompt_tokens",
    "estimate_tokens",
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
_INPUT_KEYS = {"messages", "max_tokens", "temperature", "stop"}
PREDICATE: ParamsPredicate = params_key_equals("model")
"""The model decides; its window and answer length are advertised, not asked for."""
PREDICATES: Mapping[str, ParamsPredicate] = {CAPABILITY: PREDICATE}
"""How a remote provider's params are matched (:mod:`hearthnet.contracts.routing`)."""


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
    check_input_keys(input, _INPUT_KEYS, CAPABILITY)
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


# -- the token estimate -------------------------------------------------------------------
MESSAGE_OVERHEAD = 6
"""Tokens a chat template adds around one message (role markers, separators)."""
REPLY_OVERHEAD = 4
"""Tokens of the reply's opening."""

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


def chat_input(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    stop: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``llm.chat``'s input: every field of it, those left ``None`` not sent."""
    inp: dict[str, Any] = {"messages": [dict(m) for m in messages]}
    if max_tokens is not None:
        inp["max_tokens"] = max_tokens
    if temperature is not None:
        inp["temperature"] = temperature
    if stop is not None:
        inp["stop"] = list(stop)
    return inp


class LlmClient:
    """``llm.chat`` as a caller uses it: ``params {model}`` and :func:`chat_input`'s fields."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def chat(
        self,
        model: str | None,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult:
        """The model's whole answer ``{message, finish_reason, usage}`` (``model`` ``None``: any):
        :meth:`chatting` run to its end."""
        chatting = self.chatting(
            model,
            messages,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            timeout=timeout,
            provider=provider,
        )
        return await streamed_result(chatting)

    def chatting(
        self,
        model: str | None,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> AbstractAsyncContextManager[Streamed]:
        """``llm.chat`` streamed: ``{delta}`` frames, then the whole answer."""
        return opened(
            streamer(self._caller),
            CAPABILITY,
            params={} if model is None else {"model": model},
            input=chat_input(messages, max_tokens=max_tokens, temperature=temperature, stop=stop),
            timeout=timeout,
            provider=provider,
        )
