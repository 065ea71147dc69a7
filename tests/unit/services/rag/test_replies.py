"""How many documents a ``rag.list_documents`` page holds: at most ``limit``, and within
``LIST_PAGE_BYTES`` so the page fits a peer frame whatever metadata the documents carry."""

from __future__ import annotations

import json
from typing import Any

from hearthnet.services.rag.replies import LIST_PAGE_BYTES, document_page


def doc(i: int, fields: int = 0) -> dict[str, Any]:
    return {
        "doc_cid": f"blake3:{i:064x}",
        "title": f"doc {i}",
        "metadata": {f"k{j}": "v" * 1000 for j in range(fields)},
    }


def test_a_page_stops_at_its_limit_and_says_more_follow() -> None:
    docs = [doc(i) for i in range(11)]
    assert document_page(docs, 10) == (docs[:10], True)
    assert document_page(docs[:10], 10) == (docs[:10], False)


def test_a_page_of_documents_with_long_metadata_stops_within_its_bytes() -> None:
    docs = [doc(i, fields=32) for i in range(1001)]  # ~32 KB each: 1,000 would be 32 MB
    page, more = document_page(docs, 1000)
    assert more and 0 < len(page) < 1000
    assert len(json.dumps(page).encode()) <= LIST_PAGE_BYTES
    assert page == docs[: len(page)]  # the next page starts where this one stops


def test_one_document_larger_than_the_budget_is_still_a_page() -> None:
    huge = [doc(0, fields=32) | {"title": "t" * LIST_PAGE_BYTES}, doc(1)]
    assert document_page(huge, 10) == (huge[:1], True)
