"""The fast content-stream tokenizer on every content stream of the shared PDFs, and the text it
gives for whole real documents: exactly pypdf's (the edge cases and generated streams are in
``tests/unit/services/rag/ingest/test_pdf_content.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pypdf import PdfReader
from pypdf.generic import StreamObject

from hearthnet.services.rag.ingest import pdf_content
from hearthnet.services.rag.ingest.read import read_document
from tests.shared_data import PDF_DIR
from tests.unit.services.rag.ingest.test_pdf_content import _for_text, _pypdf, _same, _same_for_text


def _content_streams() -> Iterator[tuple[str, bytes]]:
    for path in sorted(PDF_DIR.glob("*.pdf")):
        try:
            reader = PdfReader(path)
            if reader.is_encrypted:
                reader.decrypt("")
            pages = list(reader.pages)
        except Exception:
            continue  # the broken and locked files: test_reader covers how they fail
        for number, page in enumerate(pages[:60], 1):
            try:
                contents = page.get_contents()
                resources = page.get("/Resources")
                xobjects = resources.get_object().get("/XObject") if resources else None
                forms = [x.get_object() for x in xobjects.get_object().values()] if xobjects else []
            except Exception:
                continue
            if contents is not None:
                yield f"{path.name} p{number}", contents.get_data()
            for form in forms:
                if isinstance(form, StreamObject) and form.get("/Subtype") == "/Form":
                    yield f"{path.name} p{number} form", form.get_data()


def test_every_content_stream_of_the_shared_pdfs_parses_as_pypdf_parses_it() -> None:
    streams = fast = 0
    for where, data in _content_streams():
        streams += 1
        mine = pdf_content.parse_operations(data)
        if mine is None:
            continue
        fast += 1
        expected = _pypdf(data)
        assert _same(mine, expected), where
        for_text = pdf_content.parse_operations(data, text_only=True)
        assert for_text is not None, where
        assert _same(for_text, _for_text(expected)), where  # type: ignore[arg-type]
        assert _same_for_text(for_text, expected), where  # type: ignore[arg-type]
    assert streams > 400
    # The fast path must actually be taken, or the speed-up is gone without anyone noticing.
    assert fast >= 0.95 * streams, (fast, streams)


@pytest.mark.parametrize(
    "name",
    [
        "de_geotopo_lecture_notes.pdf",
        "zh_quarterly_report.pdf",
        "ar_habibi.pdf",
        "en_irs_i1040nr_instructions.pdf",
    ],
)
def test_extracted_text_is_unchanged(name: str) -> None:
    data = (PDF_DIR / name).read_bytes()
    assert pdf_content.installed()
    fast = [p.text for p in read_document(data, max_pages=5000).pages[:30]]
    pdf_content.uninstall()
    try:
        slow = [p.text for p in read_document(data, max_pages=5000).pages[:30]]
    finally:
        assert pdf_content.install()
    assert fast == slow
