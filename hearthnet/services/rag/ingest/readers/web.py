"""Web pages (trafilatura: the main text, not navigation, menus or footers) and EPUB e-books
(ebooklib; each chapter of the spine walked with lxml).  Both are sections by their headings,
each paragraph, list item and table row numbered.  A page's character set is what trafilatura
detects; an e-book with its text encrypted (DRM: ``META-INF/encryption.xml`` naming more than its
fonts) is refused.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

import ebooklib
import lxml.etree
import lxml.html
import trafilatura
from ebooklib import epub as ebooklib_epub

from hearthnet.contracts import formats
from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.readers.common import (
    Outline,
    Parts,
    TextBudget,
    done,
    open_zip,
    unreadable,
)

__all__ = ["epub", "html"]

_HEADING = re.compile(r"h([1-6])")
_BLOCKS = frozenset({"p", "li", "pre", "dt", "dd", "blockquote", "figcaption", "caption"})
_FONT = re.compile(r"\.(?:otf|ttf|woff2?)$", re.IGNORECASE)
_CIPHER_URI = re.compile(rb'<(?:\w+:)?CipherReference[^>]*URI\s*=\s*"([^"]*)"')


def html(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.HTML
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            extracted = trafilatura.extract(
                data, output_format="xml", include_tables=True, with_metadata=True, favor_recall=True
            )
        if not extracted:
            raise BadRequest("HTML file has no main text: nothing to index")
        tree = lxml.etree.fromstring(extracted.encode("utf-8"))
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    outline = Outline(TextBudget(fmt))
    for element in tree.iter("head", "p", "item", "row", "quote", "code"):
        text = " ".join(element.itertext())
        if element.tag == "head":
            m = _HEADING.fullmatch(element.get("rend") or "")
            outline.heading(int(m.group(1)) if m else 2, text)
        elif element.tag == "row":
            outline.paragraph(" | ".join(" ".join(c.itertext()).strip() for c in element))
        elif not _inside_block(element):
            outline.paragraph(text)
    return done(fmt, tree.get("title") or outline.first_heading, filename_hint, outline.pages())


def _inside_block(element: Any) -> bool:
    """A paragraph inside a list item or a table row (whose text is taken whole)."""
    return any(a.tag in ("item", "row") for a in element.iterancestors())


def epub(data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool) -> Parts:
    fmt = formats.EPUB
    with open_zip(data, fmt) as archive:
        if "META-INF/encryption.xml" in archive.namelist():
            encrypted = archive.read("META-INF/encryption.xml")[: 1 << 20]
            if any(
                not _FONT.search(uri.decode("utf-8", "replace")) for uri in _CIPHER_URI.findall(encrypted)
            ):
                raise BadRequest("EPUB file is encrypted (DRM): only e-books without DRM can be read")
    outline = Outline(TextBudget(fmt))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = ebooklib_epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
        for idref, _linear in book.spine:
            item = book.get_item_with_id(idref)
            if isinstance(item, ebooklib_epub.EpubNav):
                continue  # the table of contents
            if item is not None and item.get_type() == ebooklib.ITEM_DOCUMENT:
                _chapter(outline, item.get_content())
        titles = book.get_metadata("DC", "title")
    except BadRequest:
        raise
    except Exception as exc:
        raise unreadable(fmt, exc) from exc
    title = str(titles[0][0]) if titles and titles[0] else None
    return done(fmt, title or outline.first_heading, filename_hint, outline.pages())


def _chapter(outline: Outline, content: bytes) -> None:
    if not content.strip():
        return
    root = lxml.html.document_fromstring(content)
    for element in root.iter():
        tag = element.tag if isinstance(element.tag, str) else ""
        m = _HEADING.fullmatch(tag)
        if m:
            outline.heading(int(m.group(1)), element.text_content())
        elif tag == "tr":
            cells = [c.text_content().strip() for c in element if c.tag in ("td", "th")]
            outline.paragraph(" | ".join(c for c in cells if c))
        elif tag in _BLOCKS and not _has_block(element):
            outline.paragraph(element.text_content())


def _has_block(element: Any) -> bool:
    """A block holding blocks (a list item of paragraphs): its inner blocks are taken instead,
    and one in a table row is the row's."""
    if any(a.tag == "tr" for a in element.iterancestors()):
        return True
    return any(
        isinstance(d.tag, str) and (d.tag in _BLOCKS or _HEADING.fullmatch(d.tag))
        for d in element.iterdescendants()
    )
