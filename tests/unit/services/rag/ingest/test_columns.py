"""Multi-column pages read column by column (the IRS 1040-NR instructions, a 3-column Federal
Register), every word kept; one-column pages keep pypdf's text exactly."""

from __future__ import annotations

import io
import re
from collections import Counter

import pytest
from pypdf import PdfReader, PdfWriter

from hearthnet.services.rag.ingest.columns import ColumnOrder
from hearthnet.services.rag.ingest.read import read_document
from tests.shared_data import PDF_DIR


def pages_of(name: str, numbers: list[int]) -> bytes:
    """A PDF of the shared PDF ``name``'s pages ``numbers`` (1-based), in that order."""
    reader = PdfReader(str(PDF_DIR / name))
    writer = PdfWriter()
    for n in numbers:
        writer.add_page(reader.pages[n - 1])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_irs_instructions_read_the_signature_sentence_whole() -> None:
    doc = read_document(pages_of("en_irs_i1040nr_instructions.pdf", [4]))
    text = flat(doc.pages[0].text)
    assert "Signature. You must sign and date your tax return. See Reminders on page 30." in text
    assert "sign and date withholding" not in text  # pypdf's interleaving of two columns


def test_the_federal_registers_three_columns_read_in_order() -> None:
    doc = read_document(pages_of("en_federal_register_3col.pdf", [2]))
    text = flat(doc.pages[0].text)
    assert (
        "A stall occurs when the airflow around the wing is sufficiently disrupted to cause the wing "
        "to no longer generate lift." in text
    )
    assert "Although wing lift increases with increased AOA" in text  # the margin note is not inside
    assert "jbell on DSKJLSW7X2PROD with PROPOSALS" in text  # ... but kept, after the page


@pytest.mark.parametrize(
    ("name", "page"), [("en_irs_i1040nr_instructions.pdf", 4), ("en_federal_register_3col.pdf", 2)]
)
def test_column_order_keeps_the_words_of_the_page(name: str, page: int) -> None:
    data = pages_of(name, [page])
    ordered = ColumnOrder(data).text(1)
    assert ordered is not None
    # letters, not words: pypdf glues words of two columns together ("anrefund", "aspage")
    theirs = Counter(c for c in PdfReader(io.BytesIO(data)).pages[0].extract_text() if c.isalnum())
    ours = Counter(c for c in ordered if c.isalnum())
    kept = sum((theirs & ours).values()) / sum(theirs.values())
    assert kept > 0.99, kept


def test_a_word_broken_at_a_lines_end_keeps_its_hyphen_not_pdfiums_marker() -> None:
    """pdfium marks a hyphen that breaks a word at a line's end with U+0002: read column by
    column, the page says "dis-" as pypdf (and the page) does, never a control character."""
    doc = read_document(pages_of("en_paper_naacl06_shinyama_2col.pdf", [1]))
    text = doc.pages[0].text
    assert "\x02" not in text
    assert "dis-\ncovers all possible" in text and "pre-\nliminary system" in text


def test_a_one_column_page_keeps_pypdfs_text() -> None:
    data = pages_of("en_walden_thoreau_249p.pdf", [5, 65])
    assert ColumnOrder(data).text(1) is None and ColumnOrder(data).text(2) is None
    doc = read_document(data)
    reader = PdfReader(io.BytesIO(data))
    assert [p.text for p in doc.pages] == [p.extract_text().replace("\r\n", "\n") for p in reader.pages]


def test_a_pdf_pdfium_cannot_open_keeps_pypdfs_text() -> None:
    assert ColumnOrder(b"%PDF-1.4 not really").text(1) is None
