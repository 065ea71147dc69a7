"""The document formats HearthNet reads, in one registry: what ``rag.ingest`` accepts, what the
CLI walks a folder for and names in its help, what the web UI's file picker offers (``accept=``),
the content type the file server answers with, and what the reader dispatches on.

A format is a name, its content type, its file-name suffixes (the first is the one shown), where
it has them the magic bytes its files start with, and the reader that reads it: a function of a
module of :mod:`hearthnet.services.rag.ingest.readers` named ``"module:function"`` (``None``:
PDF and plain text, read by :mod:`hearthnet.services.rag.ingest.read` itself).  A new
format is one more entry here and its reader.

``inline``: a browser shows the original itself (the UI opens it, a PDF at ``#page=N``); the
others open as an HTML rendering of their text with an anchor at each place a chunk cites.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

__all__ = [
    "CSV",
    "DOCX",
    "EML",
    "EPUB",
    "FORMATS",
    "HEIC",
    "HTML",
    "JPEG",
    "MARKDOWN",
    "MBOX",
    "ODP",
    "ODS",
    "ODT",
    "PDF",
    "PNG",
    "PPTX",
    "SUFFIXES",
    "TEXT",
    "TIFF",
    "XLSX",
    "Format",
    "accept",
    "anchor_of",
    "by_content_type",
    "by_name",
    "by_suffix",
    "place_of",
    "supported_text",
]


@dataclass(frozen=True)
class Format:
    name: str
    content_type: str
    suffixes: tuple[str, ...]
    label: str
    """How messages name it: "PDF", "plain text"."""
    magic: bytes | None = None
    reader: str | None = None
    """``"module:function"`` in ``hearthnet.services.rag.ingest.readers``; ``None``: read.py's own."""
    inline: bool = False
    """A browser shows the original itself."""
    image: bool = False
    """Its text is read off its image by ``ocr.page``."""


_OOXML = "application/vnd.openxmlformats-officedocument."
_ODF = "application/vnd.oasis.opendocument."

PDF = Format("pdf", "application/pdf", (".pdf",), "PDF", b"%PDF-", inline=True)
TEXT = Format("text", "text/plain", (".txt",), "plain text", inline=True)
MARKDOWN = Format(
    "markdown", "text/markdown", (".md", ".markdown", ".mdown", ".mkd"), "Markdown", reader="outline:markdown"
)
DOCX = Format("docx", _OOXML + "wordprocessingml.document", (".docx",), "Word", reader="office:docx_file")
ODT = Format("odt", _ODF + "text", (".odt",), "OpenDocument text", reader="opendocument:odt")
PPTX = Format(
    "pptx", _OOXML + "presentationml.presentation", (".pptx",), "PowerPoint", reader="office:pptx_file"
)
ODP = Format("odp", _ODF + "presentation", (".odp",), "OpenDocument slides", reader="opendocument:odp")
XLSX = Format("xlsx", _OOXML + "spreadsheetml.sheet", (".xlsx", ".xlsm"), "Excel", reader="sheets:xlsx")
ODS = Format("ods", _ODF + "spreadsheet", (".ods",), "OpenDocument spreadsheet", reader="sheets:ods")
CSV = Format("csv", "text/csv", (".csv", ".tsv"), "CSV", reader="sheets:csv_file")
EPUB = Format("epub", "application/epub+zip", (".epub",), "EPUB", reader="web:epub")
HTML = Format("html", "text/html", (".html", ".htm", ".xhtml"), "HTML", reader="web:html")
EML = Format("eml", "message/rfc822", (".eml",), "e-mail", reader="mail:eml")
MBOX = Format("mbox", "application/mbox", (".mbox", ".mbx"), "mbox", reader="mail:mbox")
JPEG = Format(
    "jpeg", "image/jpeg", (".jpg", ".jpeg"), "JPEG", b"\xff\xd8\xff", "images:image", inline=True, image=True
)
PNG = Format(
    "png", "image/png", (".png",), "PNG", b"\x89PNG\r\n\x1a\n", "images:image", inline=True, image=True
)
TIFF = Format("tiff", "image/tiff", (".tif", ".tiff"), "TIFF", None, "images:image", image=True)
HEIC = Format("heic", "image/heic", (".heic", ".heif"), "HEIC", None, "images:image", image=True)
FORMATS: tuple[Format, ...] = (
    PDF,
    DOCX,
    ODT,
    PPTX,
    ODP,
    XLSX,
    ODS,
    CSV,
    EPUB,
    HTML,
    MARKDOWN,
    TEXT,
    EML,
    MBOX,
    JPEG,
    PNG,
    TIFF,
    HEIC,
)
SUFFIXES: tuple[str, ...] = tuple(s for f in FORMATS for s in f.suffixes)
"""Every suffix of a file HearthNet reads (lower case, with the dot)."""


def by_suffix(name: str) -> Format | None:
    """The format a file's name says (its suffix, in any case), if any."""
    suffix = PurePath(name).suffix.lower()
    return next((f for f in FORMATS if suffix in f.suffixes), None)


def by_content_type(content_type: str) -> Format | None:
    return next((f for f in FORMATS if f.content_type == content_type), None)


def by_name(name: str) -> Format:
    return next(f for f in FORMATS if f.name == name)


def supported_text() -> str:
    """ "PDF, Word, ... and HEIC": the formats as a refusal names them."""
    labels = [f.label for f in FORMATS]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def accept() -> str:
    """A file picker's ``accept=``: every suffix, then every content type."""
    return ",".join([*SUFFIXES, *(f.content_type for f in FORMATS)])


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def place_of(metadata: Mapping[str, Any]) -> str | None:
    """Where a chunk is, as a citation says it: "page 3", "slide 2 (Budget)", "sheet Bills, row 14",
    "Garden > Tools, paragraph 2", "message 4 (Dinner), paragraph 1"; ``None`` if unknown."""
    page, unit = _int(metadata.get("page")), metadata.get("unit")
    section = metadata.get("section") if isinstance(metadata.get("section"), str) else None
    paragraph, row = _int(metadata.get("paragraph")), _int(metadata.get("row"))
    if unit == "sheet":
        where = f"sheet {section}" if section else f"sheet {page}"
        return where + (f", row {row}" if row is not None else "")
    if unit in ("slide", "message"):
        where = f"{unit} {page}" + (f" ({section})" if section else "")
    elif unit == "section":
        where = section or ""
    elif page is not None:
        return f"page {page}"
    else:
        return None
    if paragraph is not None:
        where = f"{where}, paragraph {paragraph}" if where else f"paragraph {paragraph}"
    return where or None


def anchor_of(metadata: Mapping[str, Any]) -> str | None:
    """The fragment that opens a chunk's document at its place: ``page=3`` for a paged document
    the browser shows (a PDF in its viewer, a photo), ``u3-2`` (unit 3, paragraph or row 2) or
    ``u3`` for the HTML rendering of one without pages or one the browser cannot show (TIFF, HEIC)."""
    page = _int(metadata.get("page"))
    if page is None:
        return None
    if not metadata.get("unit"):
        named = str(metadata.get("doc_filename") or metadata.get("filename") or "")
        fmt = by_suffix(named)
        # a page the browser shows itself (a PDF, a photo) opens the original at it; a page it
        # cannot show (a TIFF or HEIC scan) opens the HTML rendering at the page's unit
        return f"page={page}" if fmt is None or fmt.inline else f"u{page}"
    mark = _int(metadata.get("paragraph"))
    mark = mark if mark is not None else _int(metadata.get("row"))
    return f"u{page}" + (f"-{mark}" if mark is not None else "")
