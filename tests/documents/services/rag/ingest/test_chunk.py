"""The chunker's token estimate against MiniLM's real tokenizer on every shared PDF."""

from __future__ import annotations

import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.chunk import chunk_document
from hearthnet.services.rag.ingest.read import read_document
from tests.shared_data import PDF_DIR
from tests.unit.services.rag.ingest.test_chunk import _real_tokenizer


@pytest.mark.slow
def test_token_estimator_calibration_on_shared_pdfs() -> None:
    """>= 99% of chunks (max_tokens=256) fit MiniLM's 256 real tokens incl. [CLS]/[SEP]."""
    tok = _real_tokenizer()
    total = fits = 0
    for pdf in sorted(PDF_DIR.glob("*.pdf")):
        try:
            doc = read_document(pdf.read_bytes(), filename_hint=pdf.name)
        except BadRequest:
            continue
        chunks = chunk_document(doc, doc_cid=pdf.name, doc_title=pdf.stem, language="", max_tokens=256)
        counts = [len(e.ids) for e in tok.encode_batch([c.text for c in chunks], add_special_tokens=True)]
        total += len(counts)
        fits += sum(1 for n in counts if n <= 256)
    assert total > 2000
    assert fits / total >= 0.99, f"{fits}/{total} chunks fit 256 tokens"
