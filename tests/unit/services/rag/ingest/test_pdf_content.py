"""The fast content-stream tokenizer gives exactly pypdf's operations, or defers to pypdf."""

from __future__ import annotations

import io
import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pypdf.generic import ContentStream, FloatObject, NumberObject

from hearthnet.services.rag.ingest import pdf_content


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _pypdf(data: bytes) -> list[tuple[Any, bytes]] | type[BaseException]:
    stream = ContentStream(None, None)
    stream._data = data
    try:
        pdf_content._ORIGINAL(stream, io.BytesIO(data))
    except Exception as exc:
        return type(exc)
    return stream._operations


def _patched(data: bytes, text_only: bool = False) -> list[tuple[Any, bytes]] | type[BaseException]:
    stream = ContentStream(None, None)
    stream._data = data
    try:
        if text_only:
            with pdf_content.text_only():
                pdf_content._parse_content_stream(stream, io.BytesIO(data))
        else:
            pdf_content._parse_content_stream(stream, io.BytesIO(data))
    except Exception as exc:
        return type(exc)
    return stream._operations


def _for_text(operations: list[tuple[Any, bytes]]) -> list[tuple[Any, bytes]]:
    """pypdf's operations without those text-only parsing leaves out."""
    return [
        (operands, op)
        for operands, op in operations
        if not (
            op in pdf_content._GRAPHICS_ONLY and all(type(x) in (NumberObject, FloatObject) for x in operands)
        )
    ]


def _removable(operation: tuple[Any, bytes]) -> bool:
    operands, op = operation
    return op in pdf_content._GRAPHICS_ONLY and all(type(x) in (NumberObject, FloatObject) for x in operands)


def _same_for_text(got: list[tuple[Any, bytes]], expected: list[tuple[Any, bytes]]) -> bool:
    """``got`` is ``expected`` with some removable operations left out, and only those."""
    rest = iter(got)
    pending = next(rest, None)
    for operation in expected:
        if pending is not None and _same(pending, operation):
            pending = next(rest, None)
        elif not _removable(operation):
            return False
    return pending is None


def _check(data: bytes, text_only: bool) -> None:
    expected = _pypdf(data)
    got = _patched(data, text_only)
    if isinstance(expected, type):
        assert got is expected
        return
    assert not isinstance(got, type), got
    if text_only:
        assert _same_for_text(got, expected)
    else:
        assert _same(got, expected)


@pytest.mark.parametrize(
    "data",
    [
        b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET",
        b"[(W)83(or\\(ds\\))-250(\\101\\0502)] TJ",  # escapes: pypdf reads the array
        b"/Span <</MCID 0 /ActualText (x)>> BDC EMC",
        b"<48 65 6c> Tj <4865 6C6> Tj <> Tj <486> Tj <a> Tj",
        b"/Na#20me gs /\xc3\xa9 gs",
        b"% comment\r\n1 0 0 1 0 0 cm % another\n q Q",
        b"BI /W 2 /H 1 /BPC 8 /CS /G ID \x00\xff EI Q",  # inline image: pypdf's parser
        b"1 0 R Do",  # a reference: pypdf fails, so must we
        b"1.2.3 -.5 +7 - , 4,5 Td",  # numbers pypdf repairs with a warning
        b"[1 [2 3] (a) true null] TJ",
        b"[1 2",  # an unterminated array
        b"(unterminated",
        b") Tj",
        b"q \x0b Q \x00",
        b"12345678901234567890123 Tw 0.000000000000000000001 Tc",
        b"1 0 0 RG 0 0 m 10 10 l S 0.5 g 1 1 1 rg BT (x) Tj ET f* W n",
        b"1 0 0RG /DeviceRGB cs 0 0 1 sc /P0 scn 1.5.5 w 2 J [3 1] 0 d",
        b"1 %c\n2 m 0 g 3 0 0 RG BT (x) Tj ET",  # a comment inside: that operation stays
        b"a" * 112 + b" " * 16,  # pypdf reads operators in pieces and gives up on this one
        b"a" * 63 + b" Tj " + b"b" * 64 + b" Tj",
        b"(" + b"1" * 3000 + b") Tj 1 0 0 RG",
        b"",
    ],
)
@pytest.mark.parametrize("text_only", [False, True])
def test_edge_cases_match_pypdf(data: bytes, text_only: bool) -> None:
    _check(data, text_only)


_TOKENS = st.one_of(
    st.integers(-(10**12), 10**12).map(lambda i: str(i).encode()),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: f"{f:.4f}".encode()),
    st.sampled_from([b".5", b"-.25", b"3.", b"+4", b"-", b".", b"1.2.3", b"4,5", b"1 0 R"]),
    st.sampled_from(
        [b"Tj", b"TJ", b"Td", b"'", b'"', b"T*", b"BT", b"ET", b"q", b"Q", b"BI", b"ID", b"EI", b"true"]
    ),
    st.from_regex(rb"/[A-Za-z0-9#\x80-\xff_.-]{0,8}", fullmatch=True),
    st.binary(max_size=12).map(lambda b: b"(" + b + b")"),
    st.from_regex(rb"<[0-9a-fA-F]{0,9}>", fullmatch=True),
    st.sampled_from(
        [b"[", b"]", b"<<", b">>", b"{", b"}", b"%c\n", b"\\", b"<4 1>", b"(a(b)c)", b"(\\n\\053)"]
    ),
)
_SEPARATORS = st.sampled_from([b" ", b"\n", b"\r\n", b"\t", b"", b"\x00", b"\x0b", b"\x0c"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_TOKENS, _SEPARATORS), max_size=40), st.booleans())
def test_generated_streams_match_pypdf(parts: list[tuple[bytes, bytes]], text_only: bool) -> None:
    _check(b"".join(token + sep for token, sep in parts), text_only)


def test_skipped_operations_still_count_against_pypdf_budget() -> None:
    # pypdf gives up on a stream with more tokens than its budget; skipping must not hide that.
    from pypdf._configuration import apply_configuration

    data = b"0 0 m " * 600 + b"BT (x) Tj ET"
    with apply_configuration(stream_parsing_work_maximum_count=1000):
        expected = _pypdf(data)
        assert isinstance(expected, type)
        assert _patched(data, text_only=True) is expected
        assert _patched(data) is expected


def test_long_digit_runs_parse_in_linear_time() -> None:
    # A search for "n n R" over the whole stream must not rescan a run of digits from every digit.
    data = b"1 0 0 RG (" + b"1" * 400_000 + b") Tj"
    started = time.process_time()
    assert pdf_content.parse_operations(data) is not None
    assert time.process_time() - started < 5  # quadratic: hours; linear: ~0.3 s here
