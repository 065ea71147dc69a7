"""Reading and chunking page by page gives exactly the chunks of reading the whole document first,
on longer shared PDFs (the short ones are in ``tests/unit/services/rag/ingest/test_document.py``)."""

from __future__ import annotations

import pytest

from tests.unit.services.rag.ingest.test_document import check_streamed_equals_whole


@pytest.mark.parametrize(
    "name",
    [
        "en_paper_naacl06_shinyama_2col.pdf",  # several pages
        "zh_quarterly_report.pdf",  # no spaces between words
    ],
)
def test_streamed_chunks_equal_whole_document_chunks(name: str) -> None:
    check_streamed_equals_whole(name)
