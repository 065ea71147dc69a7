"""What the readers share: a document's text as pages with their places, and their bounds.

A page of a document without pages is a unit of it: a section (its heading path, its paragraphs
numbered), a slide, a sheet (its rows numbered as the sheet numbers them) or a message.  The
places go with the page (:class:`~..read.PageText` ``place`` and ``marks``) into every chunk's
metadata, where :func:`hearthnet.contracts.formats.place_of` says them.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from hearthnet.contracts.formats import Format
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.read import MAX_PDF_TEXT, DocumentHeader, PageText, clean, title_hint

__all__ = [
    "MAX_ATTACHMENTS",
    "MAX_UNPACKED_BYTES",
    "Attachment",
    "Outline",
    "Parts",
    "TextBudget",
    "done",
    "open_zip",
    "stem",
    "unreadable",
]


@dataclass(frozen=True)
class Attachment:
    """A file an e-mail carries, after its pages: the ingest makes it a document of its own."""

    filename: str
    data: bytes


Parts = Iterator[DocumentHeader | PageText | Attachment]
MAX_ATTACHMENTS = 64
"""Attachments of one e-mail or mailbox taken (each of a format HearthNet reads)."""

MAX_UNPACKED_BYTES = 512 << 20
"""Bytes the members of a zipped document (DOCX, ODT, EPUB...) may unpack to: a 300-page e-book
with its images unpacks to ~50 MB; a zip bomb to gigabytes from a few KB."""
MAX_COLUMNS = 1024
"""Columns of a sheet read (a sheet may declare 16,384, each empty)."""
MAX_ROWS = 1_000_000
"""Rows of a document's sheets, empty ones counted (Excel's own limit per sheet is 1,048,576)."""


def unreadable(fmt: Format, exc: BaseException) -> BadRequest:
    return BadRequest(f"not a readable {fmt.label} file: {type(exc).__name__}; re-save or re-export it")


def stem(filename_hint: str | None) -> str | None:
    return (PurePath(filename_hint).stem or None) if filename_hint else None


class TextBudget:
    """Characters of text a document may yield: past ``MAX_PDF_TEXT`` (or the caller's
    ``max_text_bytes``, for formats that are text) it is refused, naming the limit."""

    def __init__(self, fmt: Format, limit: int | None = None) -> None:
        self.fmt = fmt
        self.limit = MAX_PDF_TEXT if limit is None else limit
        self.used = 0

    def add(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise BadRequest(
                f"the {self.fmt.label} file yields more than {self.limit:,} characters of text: "
                "split it into smaller files"
            )


def open_zip(data: bytes, fmt: Format) -> zipfile.ZipFile:
    """The zip container of ``data``; refused if broken, encrypted or unpacking to too much."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise unreadable(fmt, exc) from exc
    if any(m.flag_bits & 0x1 for m in members):
        raise BadRequest(f"{fmt.label} file is encrypted with a password; save it without one first")
    unpacked = sum(m.file_size for m in members)
    if unpacked > MAX_UNPACKED_BYTES:
        raise BadRequest(
            f"{fmt.label} file unpacks to {unpacked:,} bytes, more than {MAX_UNPACKED_BYTES:,}: "
            "the file is damaged or built to blow up; re-save it or split it"
        )
    return archive


def done(fmt: Format, title: str | None, filename_hint: str | None, pages: Sequence[PageText]) -> Parts:
    """The header and ``pages``, or the refusal of a document without text."""
    if not any(p.text.strip() for p in pages):
        raise BadRequest(f"{fmt.label} file has no text: nothing to index")
    yield DocumentHeader(fmt.content_type, title_hint(title) or title_hint(stem(filename_hint)), len(pages))
    yield from pages


class Outline:
    """Sections by a document's headings: each section a page of its heading path and paragraphs.

    :meth:`heading` starts a section (a level pops the path down to it), :meth:`paragraph` adds
    a numbered paragraph to it; :meth:`pages` ends the last.  ``unit`` and ``section`` go into
    each page's place (a chapter of an e-book, a message of a mailbox: ``unit`` says which).
    """

    def __init__(
        self, budget: TextBudget, *, unit: str = "section", fields: Sequence[tuple[str, str]] = ()
    ) -> None:
        self._budget = budget
        self._unit = unit
        self._fields = tuple(fields)
        self._path: list[tuple[int, str]] = []
        self._parts: list[str] = []
        self._marks: list[tuple[int, int]] = []
        self._offset = 0
        self._pages: list[PageText] = []
        self.first_heading: str | None = None

    def heading(self, level: int, text: str) -> None:
        text = " ".join(clean(text).split())
        if not text:
            return
        self._end()
        if self.first_heading is None:
            self.first_heading = text
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, text))
        self._add(text, numbered=False)

    def paragraph(self, text: str) -> None:
        text = clean(text).strip()
        if text:
            self._add(text, numbered=True)

    def section_break(self, unit_fields: Sequence[tuple[str, str]] = ()) -> None:
        """End the section here; the next ones carry ``unit_fields`` (a mailbox's next message)."""
        self._end()
        self._path = []
        self._fields = tuple(unit_fields)

    def _add(self, text: str, *, numbered: bool) -> None:
        if self._parts:
            self._offset += 2
        if numbered:
            self._marks.append((self._offset, len(self._marks) + 1))
        self._parts.append(text)
        self._offset += len(text)
        self._budget.add(len(text) + 2)

    def _end(self) -> None:
        if self._marks:
            place: list[tuple[str, str | int]] = [("unit", self._unit), *self._fields]
            if self._path:
                place.append(("section", " > ".join(t for _, t in self._path)))
            page = PageText(
                page=len(self._pages) + 1,
                text="\n\n".join(self._parts),
                place=tuple(place),
                marks=tuple(self._marks),
            )
            self._pages.append(page)
        self._parts, self._marks, self._offset = [], [], 0

    def pages(self) -> list[PageText]:
        self._end()
        return self._pages
