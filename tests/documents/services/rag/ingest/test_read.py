"""Every shared real-world PDF is read whole, or refused with its own specific message (the list
of what each one gives is ``EXPECTED`` in ``tests/unit/services/rag/ingest/test_read.py``)."""

from __future__ import annotations

import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest.read import read_document
from tests.shared_data import PDF_DIR
from tests.unit.services.rag.ingest.test_read import EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_pdf_reads_or_fails_specifically(name: str) -> None:
    data = (PDF_DIR / name).read_bytes()
    expected = EXPECTED[name]
    if expected != "ok":
        with pytest.raises(BadRequest) as err:
            read_document(data, filename_hint=name)
        assert expected in err.value.message
        assert err.value.code == "bad_request"
        return
    doc = read_document(data, filename_hint=name)
    assert doc.content_type == "application/pdf"
    assert doc.page_count == len(doc.pages) >= 1
    assert [p.page for p in doc.pages] == list(range(1, doc.page_count + 1))
    assert any(p.text.strip() for p in doc.pages)
