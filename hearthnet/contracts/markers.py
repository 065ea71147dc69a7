"""Citation markers in an answer's text: the one grammar the composer checks and front doors read.

A **marker** is any closed bracket that holds a ``#``: ``[file#chunk_id]``, several refs in one
bracket separated by ``,`` or ``;``.  Whatever its shape (``[a#b]``, ``[x y#§1]``), a marker
either names chunks the answer was given, or it does not reach a reader.  Brackets without a
``#`` (``[1]``, ``[the manual]``) are text.

:class:`Brackets` splits text that arrives in pieces (a model's deltas) into plain text and
closed bracket spans, holding a span back until it closes, at most :data:`MAX_MARKER_CHARS`
characters.  A span that cannot be a marker (it overran the bound, or another ``[`` opened
inside it) is released as text with its ``[`` turned into ``(``: so in what it lets through, a
``[`` is either closed by the next ``]`` with no bracket between, or left open at the very end,
and any ``[...#...]`` a reader finds is one of the spans it handed over.  Pure and incremental:
any split of the same text gives the same pieces' text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_MARKER_CHARS", "Brackets", "Span", "marker_ids"]

MAX_MARKER_CHARS = 1000
"""Most characters (brackets included) held back while waiting for a ``]``: several refs of long
file names (at most 200 characters each) and ids (at most 128) fit."""
_ID = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9_.:\-]*)")
_LEADS = " \t"


@dataclass(frozen=True)
class Span:
    """A bracket span: the one space or tab before it (``lead``), its inside, and whether it closed
    (a span still open when the text ended is not closed)."""

    lead: str
    inner: str
    closed: bool = True

    @property
    def text(self) -> str:
        return f"{self.lead}[{self.inner}]" if self.closed else f"{self.lead}[{self.inner}"

    @property
    def is_marker(self) -> bool:
        return "#" in self.inner


def marker_ids(inner: str) -> list[str]:
    """The chunk id of each ref of a marker's inside, in order (``""`` for a ref with no id): the
    run of id characters after a ref's last ``#``.  Parts without ``#`` are no refs."""
    out = []
    for part in re.split(r"[;,]", inner):
        if "#" not in part:
            continue
        found = _ID.match(part.rsplit("#", 1)[1])
        out.append(found.group(1) if found else "")
    return out


class Brackets:
    """Incremental splitter: :meth:`feed` and :meth:`close` return plain text (``str``) and
    :class:`Span`s in order; ``"".join`` of the texts of all pieces is the text fed, except for
    released spans' ``[`` turned ``(`` (see the module's docstring)."""

    def __init__(self, limit: int = MAX_MARKER_CHARS) -> None:
        self._limit = max(2, limit)
        self._pending = ""  # a space or tab that may lead the next span
        self._lead = ""
        self._span: list[str] | None = None  # the open span's inside, in pieces
        self._size = 0

    def feed(self, text: str) -> list[str | Span]:
        out: list[str | Span] = []
        i = 0
        while i < len(text):
            if self._span is None:
                j = text.find("[", i)
                self._plain(text[i : len(text) if j < 0 else j], out)
                if j < 0:
                    break
                self._lead, self._pending, self._span, self._size = self._pending, "", [], 2
                i = j + 1
                continue
            m = _BRACKET.search(text, i)
            end = len(text) if m is None else m.start()
            room = max(0, self._limit - self._size)
            if end - i > room:  # overran the bound: not a marker
                self._span.append(text[i : i + room])
                out.append(self._release())
                i += room
                continue
            self._span.append(text[i:end])
            self._size += end - i
            if m is None:
                break
            if m.group() == "]":
                out.append(Span(self._lead, "".join(self._span)))
                self._span = None
            else:  # a "[" inside: the open span is no marker, the new one may be
                out.append(self._release())
                self._lead, self._span, self._size = "", [], 2
            i = end + 1
        return out

    def close(self) -> list[str | Span]:
        """The rest: a held space, or the span still open (``closed=False``)."""
        out: list[str | Span] = []
        if self._span is not None:
            out.append(Span(self._lead, "".join(self._span), closed=False))
            self._span = None
        elif self._pending:
            out.append(self._pending)
        self._pending = ""
        return out

    def _plain(self, segment: str, out: list[str | Span]) -> None:
        if not segment:
            return
        text = self._pending + segment
        if text[-1] in _LEADS:
            text, self._pending = text[:-1], text[-1]
        else:
            self._pending = ""
        if text:
            out.append(text)

    def _release(self) -> str:
        assert self._span is not None
        text = f"{self._lead}({''.join(self._span)}"
        self._span = None
        return text


_BRACKET = re.compile(r"[\[\]]")
