"""Multi-column PDF pages read column by column: the text runs pdfium finds on a page (its text
rectangles) ordered by their positions, never a parser of our own.

pypdf gives a page's text in content-stream order, which on some multi-column layouts (the IRS
1040-NR instructions, a 3-column Federal Register) interleaves the columns line by line.  For each
page :class:`ColumnOrder` asks pdfium (pypdfium2, already the OCR's renderer) for the page's text
rectangles and looks for gutters: vertical bands inside the text that (almost) no rectangle
crosses, with enough text in each column between them.  A page without one is left to pypdf (its
text unchanged).  On a page with columns every rectangle is cut at the gutters it spans without a
character in them (a run that only joins two columns' lines), a rectangle with characters in a
gutter spans the page (a heading, a running header): those divide the page into bands, and each
band is read column by column, each column top to bottom, each line left to right.

pdfium is not thread-safe: one lock serialises every use in a process.  A page pdfium cannot read,
or one too large to look at (:data:`MAX_RECTS`), keeps pypdf's text.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import structlog

__all__ = ["MAX_RECTS", "ColumnOrder", "Piece", "column_order"]

log = structlog.get_logger("hearthnet.rag.ingest")

_LOCK = threading.Lock()
PDFIUM_HYPHEN = "\x02"
"""What pdfium gives for a hyphen that breaks a word at a line's end: the hyphen again, as
pypdf's text (and the page) has it, not a control character in chunks, citations and keywords."""
MAX_RECTS = 20_000
"""Text rectangles a page may have for its columns to be looked for (a real page has hundreds)."""
MIN_GUTTER = 6.0
"""Points a gutter is wide at least (a space between words is 2-4 points)."""
MIN_COLUMN_LINES = 8
"""Rectangles each column holds at least: fewer is a figure's labels or a short table."""
MIN_COLUMN_SHARE = 0.15
"""Each column is at least this share of the text's width (a table's narrow number columns are not)."""
ASIDE = 3.0
"""A run taller than this many typical lines is set sideways (a margin note): read after the page."""
FILLED = 0.5
"""A column's typical line (the median rectangle) fills at least this share of its width: prose."""
GUTTER_SHARE = 0.25
"""A gutter is crossed by at most this share of the rectangles that cross a typical point of the
text (the median): runs that join two columns' lines, a heading, a running header."""


@dataclass(frozen=True)
class Piece:
    """A run of text on one line: its box (PDF points, y up) and text."""

    left: float
    bottom: float
    right: float
    top: float
    text: str

    @property
    def middle(self) -> float:
        return (self.bottom + self.top) / 2


def _gutters(rects: list[tuple[float, float, float, float]]) -> list[float]:
    """The x of the middle of each gutter between columns (none: one column)."""
    if len(rects) < 2 * MIN_COLUMN_LINES:
        return []
    lo = min(r[0] for r in rects)
    hi = max(r[2] for r in rects)
    width = hi - lo
    if width <= 0:
        return []
    bins = [0] * (int(width) + 2)
    for left, _, right, _ in rects:
        for x in range(int(left - lo), min(len(bins), int(right - lo) + 1)):
            bins[x] += 1
    busy = sorted(bins)[len(bins) // 2]
    noise = max(1, int(GUTTER_SHARE * busy))
    gaps: list[tuple[int, int]] = []
    start = None
    for x, count in enumerate(bins):
        if count <= noise and start is None:
            start = x
        elif count > noise and start is not None:
            gaps.append((start, x))
            start = None
    inner = [(a, b) for a, b in gaps if b - a >= MIN_GUTTER and a > 0 and b < len(bins) - 1]
    cuts = [lo + (a + b) / 2 for a, b in inner]
    edges = [lo, *cuts, hi]
    for a, b in itertools.pairwise(edges):
        widths = _row_widths([r for r in rects if r[0] >= a - 1 and r[2] <= b + 1])
        if b - a < MIN_COLUMN_SHARE * width or len(widths) < MIN_COLUMN_LINES:
            return []  # not columns of text: a table, a figure, a margin note
        if widths[len(widths) // 2] < FILLED * (b - a):
            return []  # its lines do not fill it: a diagram's boxes, a table's cells
    return cuts


def _row_widths(rects: list[tuple[float, float, float, float]]) -> list[float]:
    """The widths of the lines the rectangles make (those whose middles share a line joined),
    smallest first."""
    rows: list[list[float]] = []  # [bottom, top, left, right]
    for left, bottom, right, top in sorted(rects, key=lambda r: -r[3]):
        middle = (bottom + top) / 2
        if rows and rows[-1][0] < middle < rows[-1][1]:
            rows[-1][2], rows[-1][3] = min(rows[-1][2], left), max(rows[-1][3], right)
        else:
            rows.append([bottom, top, left, right])
    return sorted(r[3] - r[2] for r in rows)


def _pieces(textpage: Any, rects: list[tuple[float, float, float, float]], cuts: list[float]) -> list[Piece]:
    """Each rectangle's text, cut at the gutters it spans without a character in them."""
    out: list[Piece] = []
    for left, bottom, right, top in rects:
        spans = [c for c in cuts if left < c < right]
        joined = any(
            textpage.get_text_bounded(c - MIN_GUTTER / 2, bottom, c + MIN_GUTTER / 2, top).strip()
            for c in spans
        )
        edges = [left, right] if joined or not spans else [left, *spans, right]
        for a, b in itertools.pairwise(edges):
            text = textpage.get_text_bounded(a, bottom, b, top).replace(PDFIUM_HYPHEN, "-")
            if text.strip():
                out.append(Piece(a, bottom, b, top, text))
    return out


def _column(piece: Piece, cuts: list[float]) -> int | None:
    """The column a piece lies in, or ``None`` if it spans a gutter (the page's width)."""
    col = sum(1 for c in cuts if piece.left >= c - 1)
    if any(piece.left < c - 1 < piece.right - 2 for c in cuts):
        return None
    return col


def _same_line(a: Piece, b: Piece) -> bool:
    """Each one's middle within the other's height (a tall run of rotated text joins no line)."""
    return a.bottom < b.middle < a.top and b.bottom < a.middle < b.top


def _lines(pieces: list[Piece]) -> Iterator[str]:
    """Pieces of one column (or the page's width) top to bottom, a line's left to right."""
    rows: list[list[Piece]] = []
    for piece in sorted(pieces, key=lambda p: (-p.top, p.left)):
        row = rows[-1] if rows else None
        if row is not None and _same_line(row[0], piece):
            row.append(piece)
        else:
            rows.append([piece])
    for row in rows:
        yield " ".join(p.text.strip() for p in sorted(row, key=lambda p: p.left))


def column_order(pieces: list[Piece], cuts: list[float]) -> str:
    """The page's text: bands between the pieces that span the page, each read column by column;
    runs far taller than a line (text set sideways in a margin) after them, never inside a sentence."""
    heights = sorted(p.top - p.bottom for p in pieces)
    line = heights[len(heights) // 2] if heights else 0.0
    asides = [p for p in pieces if p.top - p.bottom > ASIDE * line]
    pieces = [p for p in pieces if p.top - p.bottom <= ASIDE * line]
    spanning = sorted((p for p in pieces if _column(p, cuts) is None), key=lambda p: -p.top)
    columns = [p for p in pieces if _column(p, cuts) is not None]
    out: list[str] = []
    above = float("inf")
    for divider in [*spanning, None]:
        below = divider.top if divider is not None else float("-inf")
        band = [p for p in columns if below <= p.middle < above]
        for col in range(len(cuts) + 1):
            out.extend(_lines([p for p in band if _column(p, cuts) == col]))
        if divider is not None:
            out.extend(_lines([divider]))
            above = divider.bottom
    out.extend(p.text.strip() for p in asides)
    return "\n".join(out)


class ColumnOrder:
    """The pages of one PDF as pdfium reads them, opened on first use (blocking; one per read)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pdf: Any = None
        self._failed = False

    def text(self, number: int) -> str | None:
        """Page ``number``'s text read column by column, or ``None`` to keep pypdf's (one column,
        or pdfium cannot tell)."""
        if self._failed:
            return None
        import pypdfium2 as pdfium

        with _LOCK:
            try:
                if self._pdf is None:
                    self._pdf = pdfium.PdfDocument(self._data)
                page = self._pdf[number - 1]
                textpage = page.get_textpage()
                try:
                    count = textpage.count_rects()
                    if count > MAX_RECTS:
                        return None
                    rects = [tuple(textpage.get_rect(i)) for i in range(count)]
                    cuts = _gutters(rects)
                    if not cuts:
                        return None
                    return column_order(_pieces(textpage, rects, cuts), cuts)
                finally:
                    textpage.close()
                    page.close()
            except pdfium.PdfiumError as exc:
                self._failed = True
                log.info("pdf_columns_unread", page=number, error=str(exc)[:100])
                return None

    def close(self) -> None:
        with _LOCK, contextlib.suppress(Exception):
            if self._pdf is not None:
                self._pdf.close()
                self._pdf = None
