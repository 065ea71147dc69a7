"""Values given on the command line, checked before any node is asked: JSON objects, corpus names,
questions, ``--timeout`` and ``--meta KEY=VALUE`` metadata; each refusal names the argument as the
user typed it."""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest
from hearthnet.frontends.control.protocol import timeout_problem
from hearthnet.frontends.json_input import MAX_JSON_DEPTH, loads_bounded
from hearthnet.wire.codec import value_problem

__all__ = [
    "MAX_JSON_DEPTH",
    "META_TYPES",
    "corpus_arg",
    "load_json",
    "meta_args",
    "stdin_text",
    "text_arg",
    "timeout_arg",
]


class _NotFinite(Exception):
    pass


def _not_a_json_number(text: str) -> Any:
    raise _NotFinite(f"{text[:40]} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _not_a_json_number(text)
    return value


def load_json(text: str | None, what: str) -> dict[str, Any]:
    """A JSON object given on the command line; anything else is ``bad_request`` saying what."""
    if text is None:
        return {}
    try:
        value = loads_bounded(text, what=what, parse_constant=_not_a_json_number, parse_float=_finite)
    except _NotFinite as exc:
        raise BadRequest(f"{what}: {exc}") from None
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


META_TYPES = ("str", "int", "float", "bool", "date")
"""The types ``--meta KEY:TYPE=VALUE`` may name."""
MAX_META_FIELDS = 32
"""Most metadata fields a document carries (the RAG service's limit)."""
MAX_META_STRING = 1000
_META_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT64 = 2**63
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _meta_int(key: str, text: str) -> int:
    if _INT.fullmatch(text.strip()) is None:
        raise BadRequest(f"--meta {key}: {text[:40]!r} is not a whole number")
    value = int(text.strip())
    if not -_INT64 <= value < _INT64:
        raise BadRequest(f"--meta {key}: {text[:40]} is outside the 64-bit integer range; use {key}:str=...")
    return value


def _meta_float(key: str, text: str) -> float:
    if _FLOAT.fullmatch(text.strip()) is None:
        raise BadRequest(f"--meta {key}: {text[:40]!r} is not a finite number")
    value = float(text.strip())
    if not math.isfinite(value):
        raise BadRequest(f"--meta {key}: {text[:40]} is not a finite number")
    return value


def _meta_date(key: str, text: str) -> str:
    """An ISO 8601 date or date-time, kept as the text given (filters compare strings)."""
    try:
        (dt.date.fromisoformat if len(text) == 10 else dt.datetime.fromisoformat)(text)
    except ValueError:
        raise BadRequest(
            f"--meta {key}: {text[:40]!r} is not an ISO 8601 date or date-time (e.g. 2024-05-01 or "
            "2024-05-01T09:30:00)"
        ) from None
    return text


def _meta_value(key: str, kind: str | None, text: str) -> str | int | float | bool:
    if kind is None:  # inferred: true/false, a whole number, a decimal number; anything else is text
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        if re.match(r"[+-]?0[0-9]", text):
            return text  # a number written with leading zeros ("007", a postcode) is an identifier
        if _INT.fullmatch(text):
            return _meta_int(key, text)
        if _FLOAT.fullmatch(text):
            return _meta_float(key, text)
        return text
    if kind == "int":
        return _meta_int(key, text)
    if kind == "float":
        return _meta_float(key, text)
    if kind == "bool":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise BadRequest(f"--meta {key}: {text[:40]!r} is not a boolean (true/false, yes/no, 1/0)")
    if kind == "date":
        return _meta_date(key, text)
    return text


def meta_args(items: Sequence[str] | None) -> dict[str, str | int | float | bool]:
    """``--meta KEY=VALUE`` (repeatable) as a document's metadata.

    A value is typed as written: ``true``/``false`` a boolean, ``42`` an integer, ``0.5`` or
    ``1e3`` a float, anything else (an ISO date too) a string; ``KEY:TYPE=VALUE`` names the type
    (str, int, float, bool, date: an ISO 8601 date checked and kept as a string).  A malformed
    item, a key given twice or a value of the wrong type is ``bad_request`` naming it.
    """
    out: dict[str, str | int | float | bool] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep:
            raise BadRequest(f"--meta {item[:60]!r} must be KEY=VALUE (or KEY:TYPE=VALUE)")
        key, colon, kind = name.partition(":")
        if _META_KEY.fullmatch(key) is None:
            raise BadRequest(
                f"--meta key {key[:70]!r} is invalid: use 1-64 letters, digits or '_', not starting "
                "with a digit"
            )
        if colon and kind not in META_TYPES:
            raise BadRequest(f"--meta {key}: type {kind[:20]!r} is not one of {', '.join(META_TYPES)}")
        if key in out:
            raise BadRequest(f"--meta {key} is given twice")
        value = _meta_value(key, kind if colon else None, text)
        if isinstance(value, str) and len(value) > MAX_META_STRING:
            raise BadRequest(f"--meta {key}: the value is {len(value)} characters; at most {MAX_META_STRING}")
        out[key] = value
    if len(out) > MAX_META_FIELDS:
        raise BadRequest(f"--meta is given {len(out)} times; a document has at most {MAX_META_FIELDS} fields")
    return out
