"""Documents of every format the registry names, made by the libraries that read them from the
text of the shared PDFs (Walden), each with one passage whose place the tests know.

:func:`make` writes one into a folder and says where its target passage is: what its chunks'
metadata hold there, and how a citation says it.  The question is a sentence of that passage.
Images are the real scan of the shared ``scanned_with_ocr_text_layer.pdf`` page 2, rendered by
PDFium and saved by Pillow (HEIC by pillow-heif).
"""

from __future__ import annotations

import csv
import email.policy
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from functools import cache
from pathlib import Path
from typing import Any

from pypdf import PdfReader

from tests.shared_data import PDF_DIR

WALDEN = PDF_DIR / "en_walden_thoreau_249p.pdf"
SCAN = PDF_DIR / "scanned_with_ocr_text_layer.pdf"
SCAN_PHRASE = "thirteen dollars"
SCAN_QUESTION = "Is a family dependent upon the thirteen dollars a month drawn here by its head?"
SECTIONS = ("Clothing", "Shelter", "Furniture")
"""Three sections of two passages each; the target is the second passage of "Shelter"."""
TARGET = 3
"""Index of the target passage among :func:`passages` (section 2, its paragraph 2; slide 4)."""


@cache
def passages() -> tuple[str, ...]:
    """Six passages of Walden: the first sentences (about 500 characters) of six pages."""
    reader = PdfReader(str(WALDEN))
    out = []
    for index in (20, 30, 40, 50, 60, 70):
        text = " ".join((reader.pages[index].extract_text() or "").split())
        sentences = re.split(r"(?<=[.!?])\s+", text)[1:]  # the page's first sentence may be cut
        passage = ""
        for s in sentences:
            passage = f"{passage} {s}".strip()
            if len(passage) > 500:
                break
        out.append(passage)
    return tuple(out)


def question() -> str:
    """The longest sentence of the target passage."""
    return max(re.split(r"(?<=[.!?])\s+", passages()[TARGET]), key=len)


@dataclass(frozen=True)
class Made:
    path: Path
    phrase: str
    """Words of the target passage (for an image: of the scan)."""
    metadata: dict[str, Any]
    """What the target passage's chunks carry in their metadata."""
    place: str
    """How a citation says where the target passage is."""
    extra: dict[str, Any] = field(default_factory=dict)


def _sections() -> list[tuple[str, list[str]]]:
    p = passages()
    return [(SECTIONS[i], [p[2 * i], p[2 * i + 1]]) for i in range(3)]


_SECTION = {"unit": "section", "page": 2, "section": "Walden > Shelter", "paragraph": 2}
_SECTION_PLACE = "Walden > Shelter, paragraph 2"


def _docx(folder: Path) -> Made:
    import docx

    d = docx.Document()
    d.add_heading("Walden", 1)
    for title, paras in _sections():
        d.add_heading(title, 2)
        for para in paras:
            d.add_paragraph(para)
    path = folder / "walden.docx"
    d.save(str(path))
    return Made(path, passages()[TARGET][:60], _SECTION, _SECTION_PLACE)


def _odt(folder: Path) -> Made:
    import odfdo

    d = odfdo.Document("text")
    d.body.append(odfdo.Header(1, "Walden"))
    for title, paras in _sections():
        d.body.append(odfdo.Header(2, title))
        for para in paras:
            d.body.append(odfdo.Paragraph(para))
    path = folder / "walden.odt"
    d.save(path)
    return Made(path, passages()[TARGET][:60], _SECTION, _SECTION_PLACE)


def _markdown(folder: Path) -> Made:
    lines = ["# Walden", ""]
    for title, paras in _sections():
        lines += [f"## {title}", ""]
        for para in paras:
            lines += [para, ""]
    path = folder / "walden.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return Made(path, passages()[TARGET][:60], _SECTION, _SECTION_PLACE)


def _html_text() -> str:
    body = ["<h1>Walden</h1>"]
    for title, paras in _sections():
        body.append(f"<h2>{title}</h2>")
        body += [f"<p>{para}</p>" for para in paras]
    nav = "<nav><a href='/'>Home</a> | <a href='/books'>Books</a> | <a href='/login'>Log in</a></nav>"
    foot = "<footer>Copyright the reading club. Cookie settings. Imprint.</footer>"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Walden</title></head><body>"
        f"{nav}<article>{''.join(body)}</article>{foot}</body></html>"
    )


def _html(folder: Path) -> Made:
    path = folder / "walden.html"
    path.write_text(_html_text(), encoding="utf-8")
    return Made(path, passages()[TARGET][:60], _SECTION, _SECTION_PLACE, {"navigation": "Cookie settings"})


def _epub(folder: Path) -> Made:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("walden-test")
    book.set_title("Walden")
    book.set_language("en")
    chapters = []
    for i, (title, paras) in enumerate(_sections(), start=1):
        c = epub.EpubHtml(title=title, file_name=f"c{i}.xhtml", lang="en")
        c.content = f"<html><body><h1>{title}</h1>" + "".join(f"<p>{p}</p>" for p in paras) + "</body></html>"
        book.add_item(c)
        chapters.append(c)
    book.toc = tuple(chapters)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    path = folder / "walden.epub"
    epub.write_epub(str(path), book)
    meta = {"unit": "section", "page": 2, "section": "Shelter", "paragraph": 2}
    return Made(path, passages()[TARGET][:60], meta, "Shelter, paragraph 2")


def _slides() -> list[tuple[str, str]]:
    return [(f"Walden, part {i + 1}", p) for i, p in enumerate(passages())]


def _pptx(folder: Path) -> Made:
    import pptx

    deck = pptx.Presentation()
    for title, text in _slides():
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = text
    path = folder / "walden.pptx"
    deck.save(str(path))
    meta = {"unit": "slide", "page": 4, "section": "Walden, part 4"}
    return Made(path, passages()[TARGET][:60], meta, "slide 4 (Walden, part 4)")


def _odp(folder: Path) -> Made:
    import odfdo

    d = odfdo.Document("presentation")
    for old in d.body.get_draw_pages():
        d.body.delete(old)
    for i, (title, text) in enumerate(_slides(), start=1):
        page = odfdo.DrawPage(f"p{i}", name=f"page{i}")
        heading = odfdo.Frame.text_frame(title, size=("20cm", "2cm"), position=("1cm", "1cm"))
        heading.set_attribute("presentation:class", "title")
        page.append(heading)
        page.append(odfdo.Frame.text_frame(text, size=("20cm", "10cm"), position=("1cm", "4cm")))
        d.body.append(page)
    path = folder / "walden.odp"
    d.save(path)
    meta = {"unit": "slide", "page": 4, "section": "Walden, part 4"}
    return Made(path, passages()[TARGET][:60], meta, "slide 4 (Walden, part 4)")


def _rows() -> list[list[str]]:
    return [["Part", "Passage"], *([f"part {i + 1}", p] for i, p in enumerate(passages()))]


_ROW = TARGET + 2  # the header is row 1


def _xlsx(folder: Path) -> Made:
    import openpyxl

    book = openpyxl.Workbook()
    cover = book.active
    cover.title = "Cover"
    cover.append(["Walden passages, one a row"])
    sheet = book.create_sheet("Passages")
    for row in _rows():
        sheet.append(row)
    path = folder / "walden.xlsx"
    book.save(str(path))
    meta = {"unit": "sheet", "page": 2, "section": "Passages", "row": _ROW}
    return Made(path, passages()[TARGET][:60], meta, f"sheet Passages, row {_ROW}")


def _ods(folder: Path) -> Made:
    import odfdo

    d = odfdo.Document("spreadsheet")
    for old in d.body.get_tables():
        d.body.delete(old)
    cover = odfdo.Table("Cover")
    cover.set_values([["Walden passages, one a row"]])
    d.body.append(cover)
    sheet = odfdo.Table("Passages")
    sheet.set_values(_rows())
    d.body.append(sheet)
    path = folder / "walden.ods"
    d.save(path)
    meta = {"unit": "sheet", "page": 2, "section": "Passages", "row": _ROW}
    return Made(path, passages()[TARGET][:60], meta, f"sheet Passages, row {_ROW}")


def _csv(folder: Path) -> Made:
    path = folder / "walden.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(_rows())
    meta = {"unit": "sheet", "page": 1, "section": "walden", "row": _ROW}
    return Made(path, passages()[TARGET][:60], meta, f"sheet walden, row {_ROW}")


def _message(subject: str, paras: list[str]) -> EmailMessage:
    m = EmailMessage(policy=email.policy.default)
    m["Subject"] = subject
    m["From"] = "Henry <henry@walden.example>"
    m["To"] = "club@reading.example"
    m["Date"] = "Sat, 04 Jul 1846 09:00:00 +0000"
    m.set_content("\n\n".join(paras) + "\n")
    return m


def _eml(folder: Path) -> Made:
    m = _message("Notes from the pond", list(passages()))
    m.add_attachment(b"The bean field: 2.5 acres.\n", maintype="text", subtype="plain", filename="beans.txt")
    path = folder / "walden.eml"
    path.write_bytes(m.as_bytes())
    meta = {
        "unit": "message",
        "page": 1,
        "section": "Notes from the pond",
        "paragraph": TARGET + 1,
        "mail_subject": "Notes from the pond",
        "mail_from": "Henry <henry@walden.example>",
        "mail_to": "club@reading.example",
    }
    place = f"message 1 (Notes from the pond), paragraph {TARGET + 1}"
    return Made(path, passages()[TARGET][:60], meta, place, {"attachment": "beans.txt"})


def _mbox(folder: Path) -> Made:
    out = io.BytesIO()
    for title, paras in _sections():
        out.write(b"From henry@walden.example Sat Jul  4 09:00:00 1846\n")
        body = _message(title, paras).as_bytes().replace(b"\nFrom ", b"\n>From ")
        out.write(body.rstrip(b"\n") + b"\n\n")
    path = folder / "walden.mbox"
    path.write_bytes(out.getvalue())
    meta = {"unit": "message", "page": 2, "section": "Shelter", "paragraph": 2, "mail_subject": "Shelter"}
    return Made(path, passages()[TARGET][:60], meta, "message 2 (Shelter), paragraph 2")


def _image(kind: str, suffix: str) -> Callable[[Path], Made]:
    def make(folder: Path) -> Made:
        from hearthnet.services.ocr.pages import render_pdf_page

        image = render_pdf_page(SCAN.read_bytes(), 2, 150).image
        path = folder / f"letter{suffix}"
        image.save(path, kind, **({"quality": 85} if kind in ("JPEG", "HEIF") else {}))
        return Made(path, SCAN_PHRASE, {"page": 1}, "page 1")

    return make


MAKERS: dict[str, Callable[[Path], Made]] = {
    "docx": _docx,
    "odt": _odt,
    "pptx": _pptx,
    "odp": _odp,
    "xlsx": _xlsx,
    "ods": _ods,
    "csv": _csv,
    "epub": _epub,
    "html": _html,
    "markdown": _markdown,
    "eml": _eml,
    "mbox": _mbox,
    "jpeg": _image("JPEG", ".jpg"),
    "png": _image("PNG", ".png"),
    "tiff": _image("TIFF", ".tif"),
    "heic": _image("HEIF", ".heic"),
}
"""Every format of the registry but PDF and plain text (the shared PDFs and their tests' own)."""


def make(name: str, folder: Path) -> Made:
    return MAKERS[name](folder)
