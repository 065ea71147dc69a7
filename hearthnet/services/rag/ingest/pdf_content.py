"""A faster tokenizer for PDF content streams, giving exactly pypdf's operations.

Text extraction with pypdf spends about two thirds of its time splitting page
content streams into ``(operands, operator)`` pairs, one byte at a time through
``BytesIO`` (figures in ``specs/rag.md``).
:func:`parse_operations` does the common tokens - numbers, plain names,
strings without escapes or nesting, hex strings without spaces, flat arrays of
these, operators, comments - with one regular expression, builds the same
pypdf objects with pypdf's own constructors, and hands every other object to
pypdf's own reader at that position (dictionaries, escaped strings, names with
``#``, arrays holding anything else).  For a stream it is not sure about
(inline images, a ``n n R`` reference, bytes outside the grammar, a number
pypdf would repair, its work budget spent, pypdf failing) it returns ``None``
and the caller falls back to pypdf's parser for the whole stream, so the
result is always pypdf's.

Inside :func:`text_only` (around ``extract_text()``) drawing-only operations
are skipped without building their operands; pypdf's extractor ignores them,
so the text is the same.  ``tests/unit/services/rag/ingest/test_pdf_content.py`` checks both modes
against pypdf on every content stream of the shared PDFs, edge cases and
generated streams.

:func:`install` puts it in place of ``ContentStream._parse_content_stream``
(pypdf 5-7, checked at install time); :func:`uninstall` restores pypdf's.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any

from pypdf.generic import ArrayObject, ContentStream, FloatObject, NameObject, NumberObject
from pypdf.generic._data_structures import read_object
from pypdf.generic._utils import StreamParsingBudget, create_string_object

from hearthnet.services.rag.ingest.limits import ContentBudget

try:
    from pypdf import _configuration as _pypdf_configuration
except ImportError:  # pragma: no cover - pypdf without a configuration module
    _pypdf_configuration = None  # type: ignore[assignment]

__all__ = ["counted", "install", "installed", "parse_operations", "text_only", "uninstall"]

_ORIGINAL = ContentStream._parse_content_stream
_OPERATOR_LENGTH = 64
"""Longer operator-like tokens go to pypdf, which raises on some from 112 bytes (it reads them in
growing pieces); real operators have at most three bytes."""
# Every match of pypdf's IndirectPattern ([+-]?(\d+)\s+(\d+)\s+R[^a-zA-Z]) contains a match of
# this one, which (unlike a search with pypdf's) takes linear time on long runs of digits.
_REFERENCE = re.compile(rb"[0-9]\s+[0-9]+\s+R[^a-zA-Z]")
_DEFAULT_BUDGET = 2_000_000
_DEFAULT_ARRAY_LIMIT = 100_000

# Whitespace both of pypdf's skippers agree on (NUL and VT are not).
_WS = rb"[ \t\r\n\f]*+"
# pypdf's token delimiter (NameObject.delimiter_pattern): bytes-regex \s plus ()<>[]{}/%.
_REGULAR = rb"[^ \t\r\n\f\v()<>\[\]{}/%]"
# pypdf reads a number as the longest run of these bytes ('+-.' in its class is a range: ',' too),
# from a 20-byte peek; only runs that are plain ints or floats and fit in it are ours.
_NUMBER_RUN = rb"(?=[+,\-.0-9]{1,20}(?![+,\-.0-9]))"
_INT = rb"[+-]?[0-9]+"
_FLOAT = rb"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)"
_NUMBER_END = rb"(?![+,\-.0-9])"
# fmt: off
_GRAPHICS_ONLY = (
    b"m", b"l", b"c", b"v", b"y", b"re", b"h",  # path construction
    b"S", b"s", b"f", b"F", b"f*", b"B", b"B*", b"b", b"b*", b"n",  # path painting
    b"W", b"W*",  # clipping
    b"w", b"J", b"j", b"M", b"i",  # line style, flatness
    b"G", b"g", b"RG", b"rg", b"K", b"k", b"SC", b"sc",  # colours
)
# fmt: on
"""Operators of paths, clipping, line style and device colours that take only numbers.
pypdf's text extraction ignores them (it handles BT ET q Q cm Tz Tc Tw TL Tf Td Tm T* Tj
TJ ' " TD Do), so :func:`text_only` parsing skips them without building their operands."""
_SKIP = re.compile(
    rb"(?:[ \t\r\n\f]*+"
    + _NUMBER_RUN
    + rb"(?:"
    + _FLOAT
    + rb"|"
    + _INT
    + rb")"
    + _NUMBER_END
    + rb")*[ \t\r\n\f]*+(?:"
    + b"|".join(re.escape(op) for op in sorted(_GRAPHICS_ONLY, key=len, reverse=True))
    + rb")(?!"
    + _REGULAR
    + rb")"
)
_TOKEN = re.compile(
    _WS
    + rb"(?:"
    + _NUMBER_RUN
    + rb"(?:(?P<int>"
    + _INT
    + rb")|(?P<float>"
    + _FLOAT
    + rb"))"
    + _NUMBER_END
    + rb"|(?P<op>[A-Za-z'\"]"
    + _REGULAR
    + rb"*)|(?P<name>/[!-\"$&'*-.0-;=?-Z\\^-z|~]{0,255})(?!"
    + _REGULAR
    + rb")|\((?P<str>[^()\\]*)\)|<(?P<hex>[0-9A-Fa-f]*)>|(?P<open>\[)|(?P<close>\])"
    + rb"|(?P<comment>%[^\r\n]*[\r\n]?)|(?P<end>\Z)|(?P<other>[(</]))"
)
"""One token after optional whitespace.  ``name``: printable ASCII without '#' or a
delimiter, and no other byte may follow before a delimiter; ``other``: a string, ``<``
or name that pypdf reads itself.  Anything matching nothing: pypdf parses the stream."""


class _Unsure(Exception):
    """The stream needs pypdf's own parser from the start."""


class _TooMany(Exception):
    """The stream holds more operations than it may (:class:`~.limits.ContentBudget`)."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


def _limits() -> tuple[int, int]:
    if _pypdf_configuration is None or not hasattr(_pypdf_configuration, "get_configuration"):
        return _DEFAULT_BUDGET, _DEFAULT_ARRAY_LIMIT
    config = _pypdf_configuration.get_configuration()
    return (
        int(getattr(config, "stream_parsing_work_maximum_count", _DEFAULT_BUDGET)),
        int(getattr(config, "array_maximum_element_count", _DEFAULT_ARRAY_LIMIT)),
    )


_new_int = int.__new__
_new_float = float.__new__


def _simple(m: re.Match[bytes], encoding: Any) -> Any:
    """The object for a token built without pypdf's reader (number, plain name or string), or ``None``."""
    kind = m.lastgroup
    if kind == "int":
        return _new_int(NumberObject, int(m.group(kind)))
    if kind == "float":
        return _new_float(FloatObject, float(m.group(kind)))
    if kind == "str":
        return create_string_object(m.group(kind), encoding)
    if kind == "name":
        return NameObject(m.group(kind).decode("ascii"))
    if kind == "hex":
        return _hex(m.group(kind), encoding)
    return None


def _hex(digits: bytes, encoding: Any) -> Any:
    if len(digits) % 2:
        digits += b"0"
    return create_string_object(bytes.fromhex(digits.decode("ascii")), encoding)


def _read_with_pypdf(bio: BytesIO, start: int, encoding: Any, limit: int, spent: int) -> tuple[Any, int, int]:
    """pypdf's object at ``start`` (as its content-stream loop reads an operand), the offset
    after it, and the work budget spent so far including what pypdf spent on it."""
    bio.seek(start)
    budget = StreamParsingBudget(remaining_budget=limit - spent)
    obj = read_object(bio, None, encoding, parsing_budget=budget)
    return obj, bio.tell(), limit - budget.remaining_budget


def parse_operations(
    data: bytes, forced_encoding: Any = None, *, text_only: bool = False, max_operations: int | None = None
) -> list[tuple[Any, bytes]] | None:
    """pypdf's ``ContentStream.operations`` for ``data``, or ``None`` where only pypdf can say.

    ``text_only``: well-formed operations of :data:`_GRAPHICS_ONLY` (numbers, then the
    operator) may be left out (those starting where an operation starts, without a comment
    inside); pypdf's text extraction gives the same text without them.  Past ``max_operations``
    it stops (the caller refuses the stream: see :func:`counted`).
    """
    try:
        return _parse(data, forced_encoding, _SKIP.match if text_only else None, max_operations)
    except _TooMany:
        raise
    except _Unsure:
        return None
    except Exception:  # pypdf failed on an object it read for us: let it fail the same way itself
        return None


def _parse(
    data: bytes, encoding: Any, skip: Callable[[bytes, int], Any] | None, max_operations: int | None
) -> list[tuple[Any, bytes]]:
    if b"R" in data and _REFERENCE.search(data) is not None:
        raise _Unsure  # pypdf would take "n n R" for a reference (and fail without a reader)
    limit, array_limit = _limits()
    if len(data) > limit:
        # Skipped tokens are not counted; every token takes a byte, so only a stream this long
        # could spend pypdf's budget on them.
        skip = None
    spent = 0  # pypdf's work budget: one per operand, operator and array element
    bio: BytesIO | None = None
    operations: list[tuple[Any, bytes]] = []
    operands: list[Any] = []
    append = operands.append
    pos = 0
    match = _TOKEN.match
    while True:
        if skip is not None and not operands:
            # Only where an operation starts; skipped tokens cost nothing but one C-level match.
            m = skip(data, pos)
            if m is not None:
                pos = m.end()
                continue
        m = match(data, pos)
        if m is None:
            raise _Unsure
        kind = m.lastgroup
        pos = m.end()
        spent += 1
        obj = _simple(m, encoding)
        if obj is not None:
            append(obj)
        elif kind == "op":
            op = m.group(kind)
            if op == b"BI" or len(op) >= _OPERATOR_LENGTH:
                raise _Unsure  # inline image: pypdf's own reader
            operations.append((operands, op))
            if max_operations is not None and len(operations) > max_operations:
                raise _TooMany(len(operations))
            operands = []
            append = operands.append
        elif kind == "open":
            start = m.start(kind)
            items: list[Any] = []
            while True:
                m = match(data, pos)
                item = None if m is None else _simple(m, encoding)
                if item is None or len(items) >= array_limit:
                    break
                items.append(item)
                pos = m.end()  # type: ignore[union-attr]
            if m is not None and m.lastgroup == "close":
                spent += len(items)
                append(ArrayObject(items))
                pos = m.end()
            else:  # something else inside: pypdf reads the whole array
                bio = bio or BytesIO(data)
                obj, pos, spent = _read_with_pypdf(bio, start, encoding, limit, spent)
                append(obj)
        elif kind == "comment":
            spent -= 1
        elif kind == "end":
            break
        elif kind == "other":  # an escaped or nested string, a dictionary, a hex string with spaces, a name
            bio = bio or BytesIO(data)
            obj, pos, spent = _read_with_pypdf(bio, m.start(kind), encoding, limit, spent)
            append(obj)
        else:  # "close" outside an array
            raise _Unsure
        if spent > limit:
            raise _Unsure
    return operations


_state = threading.local()


@contextlib.contextmanager
def text_only() -> Iterator[None]:
    """Within it, this thread's content streams are parsed for text extraction only.

    Their ``operations`` then lack graphics-only operations (:data:`_GRAPHICS_ONLY`):
    use it around ``extract_text()`` of a document only read, never one that is written
    afterwards (a page's parsed content stream would be written without them).
    """
    before = getattr(_state, "text_only", False)
    _state.text_only = True
    try:
        yield
    finally:
        _state.text_only = before


@contextlib.contextmanager
def counted(budget: ContentBudget) -> Iterator[None]:
    """Within it, the operators of this thread's content streams are charged to ``budget`` as they
    are parsed: past one of its limits, its ``BadRequest`` (the parse stops there)."""
    before = getattr(_state, "budget", None)
    _state.budget = budget
    try:
        yield
    finally:
        _state.budget = before


def _parse_content_stream(self: ContentStream, stream: Any) -> None:
    operations = None
    budget: ContentBudget | None = getattr(_state, "budget", None)
    if isinstance(stream, BytesIO) and not self._operations:
        left = None if budget is None else budget.operators_left()
        try:
            operations = parse_operations(
                stream.getvalue(),
                self.forced_encoding,
                text_only=getattr(_state, "text_only", False),
                max_operations=left,
            )
        except _TooMany as exc:
            assert budget is not None
            budget.charge_operators(exc.count)  # raises: past the limit
    if operations is None:
        _ORIGINAL(self, stream)  # pypdf's own parser, bounded by its own parsing budget
    else:
        self._operations = operations
    if budget is not None:
        budget.charge_operators(len(self._operations))


def installed() -> bool:
    return ContentStream._parse_content_stream is _parse_content_stream


def install() -> bool:
    """Use :func:`parse_operations` in pypdf; ``False`` (nothing changed) for a pypdf it does not know."""
    import pypdf

    major = int(pypdf.__version__.split(".", 1)[0])
    if not 5 <= major <= 7 or not callable(_ORIGINAL):
        return False
    ContentStream._parse_content_stream = _parse_content_stream  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    ContentStream._parse_content_stream = _ORIGINAL  # type: ignore[method-assign]
