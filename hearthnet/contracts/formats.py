"""The document formats HearthNet reads, in one registry: what ``rag.ingest`` accepts, what the
CLI walks a folder for and names in its help, what the web UI's file picker offers (``accept=``),
the content type the file server answers with, and what the reader dispatches on.

A format is a name, its content type, its file-name suffixes (the first is the one shown) and,
where it has one, the magic bytes its files start with.  A new format is one more entry here and
its reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

__all__ = [
    "FORMATS",
    "MARKDOWN",
    "PDF",
    "SUFFIXES",
    "TEXT",
    "Format",
    "accept",
    "by_content_type",
    "by_suffix",
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


PDF = Format("pdf", "application/pdf", (".pdf",), "PDF", b"%PDF-")
TEXT = Format("text", "text/plain", (".txt",), "plain text")
MARKDOWN = Format("markdown", "text/markdown", (".md", ".markdown", ".mdown", ".mkd"), "Markdown")
FORMATS: tuple[Format, ...] = (PDF, TEXT, MARKDOWN)
SUFFIXES: tuple[str, ...] = tuple(s for f in FORMATS for s in f.suffixes)
"""Every suffix of a file HearthNet reads (lower case, with the dot)."""


def by_suffix(name: str) -> Format | None:
    """The format a file's name says (its suffix, in any case), if any."""
    suffix = PurePath(name).suffix.lower()
    return next((f for f in FORMATS if suffix in f.suffixes), None)


def by_content_type(content_type: str) -> Format | None:
    return next((f for f in FORMATS if f.content_type == content_type), None)


def supported_text() -> str:
    """ "PDF, plain text and Markdown": the formats as a refusal names them."""
    labels = [f.label for f in FORMATS]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def accept() -> str:
    """A file picker's ``accept=``: every suffix, then every content type."""
    return ",".join([*SUFFIXES, *(f.content_type for f in FORMATS)])
