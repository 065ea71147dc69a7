"""Where a citation opens its document (issue 35): the original at its page when the browser shows
it (a PDF, a photo), else the HTML rendering at the unit (a Word section, a TIFF or HEIC scan)."""

from __future__ import annotations

import pytest

from hearthnet.contracts.formats import anchor_of
from hearthnet.frontends.http.document_view import render


@pytest.mark.parametrize(
    ("filename", "anchor"),
    [
        ("tax.pdf", "page=3"),
        ("letter.jpg", "page=3"),
        ("letter.PNG", "page=3"),
        ("letter.tiff", "u3"),
        ("letter.tif", "u3"),
        ("phone.heic", "u3"),
        ("", "page=3"),  # no name (stdin): as a paged document
    ],
)
def test_a_page_opens_where_the_browser_can_show_it(filename: str, anchor: str) -> None:
    assert anchor_of({"doc_filename": filename, "page": 3}) == anchor


def test_a_scan_the_browser_cannot_show_has_its_anchor_in_the_rendering() -> None:
    meta = {"doc_filename": "letter.tiff", "doc_title": "Letter", "page": 1, "char_start": 0}
    page = render([{"text": "Dear neighbour, the fence is yours.", "metadata": meta}])
    assert f'<section id="{anchor_of(meta)}">' in page and "the fence is yours" in page
