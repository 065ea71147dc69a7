"""Word (python-docx) and PowerPoint (python-pptx) files.

A Word document is sections by its headings (paragraph styles "Title", "Heading N"), each
paragraph and table row numbered; a presentation is a page per slide (its title the section),
with its shapes' text, its tables' rows and its speaker notes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any

import docx
import pptx
from docx.table import Table
from docx.text.paragraph import Paragraph
from pptx.enum.shapes import MSO_SHAPE_TYPE

from hearthnet.contracts import formats
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

__all__ = ["docx_file", "pptx_file"]

_HEADING = re.compile(r"(?:heading|überschrift|titre|titolo|título|kop)\s*(\d)", re.IGNORECASE)


def docx_file(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.DOCX
    open_zip(data, fmt).close()
    try:
        document = docx.Document(io.BytesIO(data))
        outline = Outline(TextBudget(fmt))
        for block in document.iter_inner_content():
            _docx_block(outline, block)
        title = document.core_properties.title or outline.first_heading
    except BadRequest:
        raise
    except Exception as exc:  # a damaged file fails anywhere inside the library
        raise unreadable(fmt, exc) from exc
    return done(fmt, title, filename_hint, outline.pages())


def _docx_block(outline: Outline, block: Paragraph | Table) -> None:
    if isinstance(block, Table):
        for row in block.rows:
            outline.paragraph(" | ".join(_unique(cell.text.strip() for cell in row.cells)))
        return
    style = (block.style.name if block.style is not None else "") or ""
    level = 1 if style == "Title" else _heading_level(style)
    if level:
        outline.heading(level, block.text)
    else:
        outline.paragraph(block.text)


def _heading_level(style: str) -> int:
    m = _HEADING.match(style)
    return int(m.group(1)) + 1 if m else 0  # "Title" is level 1, "Heading 1" below it


def _unique(cells: Iterable[str]) -> list[str]:
    """A row's cell texts, a merged cell (repeated by python-docx) once."""
    out: list[str] = []
    for text in cells:
        if text and (not out or out[-1] != text):
            out.append(text)
    return out


def pptx_file(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.PPTX
    open_zip(data, fmt).close()
    budget = TextBudget(fmt)
    pages: list[PageText] = []
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
        for number, slide in enumerate(presentation.slides, start=1):
            title_shape = slide.shapes.title
            title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
            texts = list(_shape_texts(slide.shapes))
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                texts.append(slide.notes_slide.notes_text_frame.text)
            text = clean("\n\n".join(t.strip() for t in texts if t.strip()))
            budget.add(len(text))
            place: tuple[tuple[str, str | int], ...] = (("unit", "slide"),)
            if title:
                place += (("section", clean(title)[:200]),)
            pages.append(PageText(page=number, text=text, place=place))
        doc_title = presentation.core_properties.title
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    first = next((dict(p.place).get("section") for p in pages if len(p.place) > 1), None)
    return done(fmt, doc_title or (str(first) if first else None), filename_hint, pages)


def _shape_texts(shapes: Any) -> Iterable[str]:
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shape_texts(shape.shapes)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield shape.text_frame.text
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                yield " | ".join(_unique(cell.text.strip() for cell in row.cells))
