"""Values given on the command line, checked before any node is asked: JSON objects, corpus names,
questions and ``--timeout``; each refusal names the argument as the user typed it."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest
from hearthnet.frontends.control.protocol import timeout_problem
from hearthnet.wire.codec import value_problem

__all__ = ["MAX_JSON_DEPTH", "corpus_arg", "load_json", "stdin_text", "text_arg", "timeout_arg"]

MAX_JSON_DEPTH = 32
"""How deep ``--params``, ``--input`` and ``--filter`` may nest (the node takes a call's input
that deep, :data:`hearthnet.frontends.control.protocol.MAX_INPUT_DEPTH`); checked before the text
is parsed."""
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def _json_deeper(text: str, limit: int) -> bool:
    """Whether JSON ``text`` opens more than ``limit`` arrays and objects inside each other.

    Counted on the text, strings blanked out, so Python's parser (which recurses once per
    level and fails with ``RecursionError`` near 1,000) never sees a deeper document.
    """
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _not_a_json_number(text: str) -> Any:
    raise BadRequest(f"{text[:40]} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _not_a_json_number(text)
    return value


def load_json(text: str | None, what: str) -> dict[str, Any]:
    """A JSON object given on the command line; anything else is ``bad_request`` saying what."""
    if text is None:
        return {}
    if _json_deeper(text, MAX_JSON_DEPTH):
        raise BadRequest(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(text, parse_constant=_not_a_json_number, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except BadRequest as exc:
        raise BadRequest(f"{what}: {exc.message}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    problem = value_problem(value, max_depth=MAX_JSON_DEPTH)
    if problem is not None:
        raise BadRequest(f"{what}: {problem}")
    return value


def corpus_arg(name: str) -> str:
    """``--corpus`` checked before any node is asked; a name that only differs by case gets a hint."""
    try:
        return validate_corpus_name(name)
    except BadRequest as exc:
        lowered = name.lower()
        try:
            hint = f"; did you mean {validate_corpus_name(lowered)!r}?" if lowered != name else ""
        except BadRequest:
            hint = ""
        raise BadRequest(f"{exc.message}{hint}") from None


def text_arg(text: str, what: str) -> str:
    """A question given on the command line, stripped; ``bad_request`` naming ``what`` ("the
    question") when it is empty or holds bytes that are not UTF-8 (a Latin-1 byte on a UTF-8
    command line arrives as a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(
            f"{what} is not valid UTF-8 text (character {exc.start + 1}): "
            "retype it, or set a UTF-8 locale for the terminal"
        ) from None
    if not text.strip():
        raise BadRequest(f"{what} is empty")
    return text.strip()


def timeout_arg(value: float | None) -> float | None:
    """``--timeout`` checked as the node would check it, the refusal naming the flag."""
    if value is None:
        return None
    problem = timeout_problem(value)
    if problem is not None:
        raise BadRequest(f"--{problem}")
    return value


def stdin_text(what: str, limit: int) -> str:
    """``what`` read from stdin (``-`` given for it): at most ``limit`` characters of UTF-8 text,
    else ``bad_request`` saying which."""
    too_long = BadRequest(f"{what} on stdin is longer than {limit} characters")
    raw = getattr(sys.stdin, "buffer", None)  # bytes, decoded here: a stray byte is named, not a crash
    if raw is None:
        text = sys.stdin.read(limit + 1)
    else:
        data = raw.read(4 * limit + 1)
        if len(data) > 4 * limit:  # more bytes than the longest text of ``limit`` characters
            raise too_long
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(
                f"{what} read from stdin is not valid UTF-8 text (byte {exc.start + 1})"
            ) from None
    if len(text) > limit:
        raise too_long
    if not text.strip():
        raise BadRequest(f"{what} read from stdin is empty")
    return text
