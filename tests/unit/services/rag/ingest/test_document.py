"""Reading and chunking page by page gives exactly the chunks of reading the whole document first."""

from __future__ import annotations

import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.chunk import chunk_document, detect_language
from hearthnet.services.rag.ingest.document import LANGUAGE_PAGES, StreamedDocument
from hearthnet.services.rag.ingest.read import read_document
from tests.shared_data import PDF_DIR

CID = "blake3:" + "ab" * 32


def _open(data: bytes, name: str | None = None, language: str | None = None) -> StreamedDocument:
    return StreamedDocument(
        data, doc_cid=CID, title="", language=language, max_tokens=256, filename_hint=name, extra_metadata={}
    )


def _whole(data: bytes, name: str) -> list[tuple[str, str, dict[str, object]]]:
    """The pre-streaming pipeline: read everything, guess the language, chunk."""
    doc = read_document(data, filename_hint=name)
    lang = detect_language(" ".join(p.text for p in doc.pages[:LANGUAGE_PAGES])[:20_000])
    title = doc.title_hint or CID[:19]
    chunks = chunk_document(
        doc, doc_cid=CID, doc_title=title, language=lang, max_tokens=256, doc_filename=name
    )
    return [(c.chunk_id, c.text, c.metadata) for c in chunks]


@pytest.mark.parametrize(
    "name",
    [
        "encrypted_empty_user_password.pdf",
        "scanned_with_ocr_text_layer.pdf",  # fewer pages than LANGUAGE_PAGES
    ],
)
def test_streamed_chunks_equal_whole_document_chunks(name: str) -> None:
    """Longer documents (several pages, no spaces between words) are in
    ``tests/documents/services/rag/ingest/test_document.py``."""
    check_streamed_equals_whole(name)


def check_streamed_equals_whole(name: str) -> None:
    data = (PDF_DIR / name).read_bytes()
    doc = _open(data, name)
    groups = list(doc.chunk_groups())
    streamed = [(c.chunk_id, c.text, c.metadata) for g in groups for c in g]
    assert streamed == _whole(data, name)
    assert all(groups)  # a group is never empty
    prepared = doc.prepared()
    assert [c.chunk_id for c in prepared.chunks] == [s[0] for s in streamed]
    assert prepared.document.page_count == doc.header.page_count == len(prepared.document.pages)
    assert [(c.chunk_id, c.text) for c in _open(data, name).read_all().chunks] == [
        (s[0], s[1]) for s in streamed
    ]


def test_errors_come_as_early_as_they_can() -> None:
    with pytest.raises(BadRequest, match="password"):  # before any page is read
        _open((PDF_DIR / "encrypted_password_openpassword.pdf").read_bytes())
    scanned = _open((PDF_DIR / "scanned_image_only_no_text.pdf").read_bytes())
    with pytest.raises(BadRequest, match="run OCR first"):  # after the last page
        list(scanned.chunk_groups())
    with pytest.raises(RuntimeError, match="read every chunk group"):
        _open(b"# Notes\n\nsome text", "n.md", "en").prepared()
