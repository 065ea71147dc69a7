"""JSON that a front door takes from outside, parsed with its nesting bounded.

Python's parser recurses once per level and fails with ``RecursionError`` near 1,000 levels,
which no door catches as bad input; and a document a few hundred levels deep that it does parse
is still deeper than the bus takes (``MAX_JSON_DEPTH``).  So the depth is counted on the text
first (strings blanked out), and a deeper document is ``bad_request`` before the parser sees it.
Every door that reads JSON (the web UI's API, the gateway, ``/mcp``, the CLI's arguments) uses
:func:`loads_bounded`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from hearthnet.errors import BadRequest

__all__ = ["MAX_JSON_DEPTH", "json_deeper", "loads_bounded"]

MAX_JSON_DEPTH: Final = 32
"""How deep a request's JSON may nest (arrays and objects inside each other): what the bus takes
as a call's input (:data:`hearthnet.frontends.control.protocol.MAX_INPUT_DEPTH`)."""

# A string, its closing quote optional: an unterminated one runs to the end, so every match is
# consumed once and blanking is linear whatever the text (a mandatory quote backtracks: quadratic).
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET: Final = re.compile(rb"[^\[\]{}]+")


def json_deeper(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``data`` opens more than ``limit`` arrays and objects inside each other."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    depth = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads_bounded(
    data: bytes | str,
    *,
    what: str = "the request body",
    limit: int = MAX_JSON_DEPTH,
    parse_constant: Callable[[str], Any] | None = None,
    parse_float: Callable[[str], Any] | None = None,
) -> Any:
    """``data`` parsed as JSON; ``bad_request`` naming ``what`` if it is not JSON or nests deeper
    than ``limit``."""
    if json_deeper(data, limit):
        raise BadRequest(f"{what} is nested more than {limit} levels deep")
    try:
        return json.loads(data, parse_constant=parse_constant, parse_float=parse_float)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"{what} is not valid JSON") from exc
