"""JSON from outside parsed with its depth bounded (``frontends/json_input.py``)."""

from __future__ import annotations

import time

import pytest

from hearthnet.errors import BadRequest
from hearthnet.frontends.json_input import MAX_JSON_DEPTH, json_deeper, loads_bounded


def test_depth_is_counted_outside_strings_only() -> None:
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert not json_deeper(at_limit)
    assert json_deeper("[" + at_limit + "]")
    assert not json_deeper('{"a": "' + "[" * 500 + '"}')
    assert not json_deeper('["\\"' + "[" * 500 + '"]')  # an escaped quote does not end the string
    assert loads_bounded(at_limit.encode()) == eval(at_limit)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 100_000])
def test_a_deeper_document_is_bad_request_never_a_recursion_error(depth: int) -> None:
    with pytest.raises(BadRequest, match=f"nested more than {MAX_JSON_DEPTH} levels"):
        loads_bounded("[" * depth + "]" * depth, what="the body")
    with pytest.raises(BadRequest, match="nested more than"):
        loads_bounded(b'{"x": ' + b"[" * depth)  # unterminated too


def test_not_json_is_bad_request() -> None:
    with pytest.raises(BadRequest, match="not valid JSON"):
        loads_bounded(b"{nope")
    with pytest.raises(BadRequest, match="not valid JSON"):
        loads_bounded(b"\xff\xfe")


def test_unterminated_strings_cost_linear_time() -> None:
    """A body of escaped quotes with no closing one: a pattern that backtracked from every quote
    would take hours on it (10^11 steps); a linear one takes well under a second."""
    body = b'"' + b'\\"' * 500_000
    started = time.perf_counter()
    assert not json_deeper(body)
    assert time.perf_counter() - started < 30
