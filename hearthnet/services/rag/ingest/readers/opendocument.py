"""OpenDocument text and slides (odfdo).

A text is sections by its headings (``text:h`` and its outline level), each paragraph, list item
and table row numbered; a presentation is a page per slide (``draw:page``), its title the section.
An encrypted document (its manifest names encryption data) is refused before any is parsed.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import odfdo

from hearthnet.contracts import formats
from hearthnet.contracts.formats import Format
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.read import PageText, clean
from hearthnet.services.rag.ingest.readers.common import (
    Outline,
    Parts,
    TextBudget,
    done,
    open_zip,
    unreadable,
)

__all__ = ["check_odf", "odp", "odt", "open_odf"]

_MAX_DEPTH = 64


def check_odf(data: bytes, fmt: Format) -> None:
    """Refuse a damaged, bomb or encrypted OpenDocument file before parsing it."""
    with open_zip(data, fmt) as archive:
        try:
            manifest = archive.read("META-INF/manifest.xml")[: 1 << 20]
        except (KeyError, zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise unreadable(fmt, exc) from exc
    if b"encryption-data" in manifest:
        raise BadRequest(f"{fmt.label} file is encrypted with a password; save it without one first")


def open_odf(data: bytes, fmt: Format) -> Any:
    check_odf(data, fmt)
    try:
        return odfdo.Document(io.BytesIO(data))
    except Exception as exc:
        raise unreadable(fmt, exc) from exc


def odt(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.ODT
    document = open_odf(data, fmt)
    outline = Outline(TextBudget(fmt))
    try:
        _walk(outline, document.body, 0)
        title = document.get_part("meta").get_title() if document.get_part("meta") is not None else None
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    return done(fmt, title or outline.first_heading, filename_hint, outline.pages())


def _walk(outline: Outline, element: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise BadRequest("not a readable OpenDocument text file: its elements nest too deep; re-save it")
    for child in element.children:
        tag = child.tag
        if tag == "text:h":
            level = child.get_attribute_integer("text:outline-level") or 1
            outline.heading(int(level), str(child))
        elif tag == "text:p":
            outline.paragraph(str(child))
        elif tag == "table:table-row":
            cells = [str(c).strip() for c in child.children if c.tag == "table:table-cell"]
            outline.paragraph(" | ".join(c for c in cells if c))
        elif tag not in ("text:sequence-decls", "office:forms", "text:tracked-changes"):
            _walk(outline, child, depth + 1)


def odp(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.ODP
    document = open_odf(data, fmt)
    budget = TextBudget(fmt)
    pages: list[PageText] = []
    try:
        for number, slide in enumerate(document.body.get_draw_pages(), start=1):
            paragraphs = [p for p in (str(x).strip() for x in slide.get_paragraphs()) if p]
            text = clean("\n\n".join(paragraphs))
            budget.add(len(text))
            place: tuple[tuple[str, str | int], ...] = (("unit", "slide"),)
            title = _slide_title(slide) or (paragraphs[0] if paragraphs else "")
            if title:
                place += (("section", " ".join(clean(title).split())[:200]),)
            pages.append(PageText(page=number, text=text, place=place))
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    first = next((str(dict(p.place)["section"]) for p in pages if len(p.place) > 1), None)
    return done(fmt, first, filename_hint, pages)


def _slide_title(slide: Any) -> str:
    for frame in slide.get_frames():
        if frame.get_attribute_string("presentation:class") == "title":
            return " ".join(str(p) for p in frame.get_paragraphs()).strip()
    return ""
