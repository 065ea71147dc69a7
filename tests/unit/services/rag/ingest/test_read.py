"""Reading the shared real-world PDFs, text and Markdown; pypdf diagnostics go to structlog."""

from __future__ import annotations

import contextlib
import threading
import zlib

import pytest
from structlog.testing import capture_logs

from hearthnet.errors import BadRequest
from hearthnet.services.rag.ingest import read as reader_module
from hearthnet.services.rag.ingest.read import (
    MAX_PAGE_TEXT,
    DocumentHeader,
    PageText,
    detect_content_type,
    ocr_page_text,
    read_document,
    stream_document,
)
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


def test_aes256_empty_password_reads() -> None:
    doc = read_document((PDF_DIR / "encrypted_aes256_empty_password.pdf").read_bytes())
    assert doc.page_count == 1 and doc.pages[0].text.strip()


def test_corrupt_message_names_reason_class() -> None:
    with pytest.raises(BadRequest, match=r"not a readable PDF: PdfReadError; re-export or repair it"):
        read_document((PDF_DIR / "corrupt_header_only.pdf").read_bytes())


def _header(name: str, filename_hint: str) -> DocumentHeader:
    """The header ``read_document`` takes its title hint from, without reading every page after it."""
    data = (PDF_DIR / name).read_bytes()
    with contextlib.closing(stream_document(data, filename_hint=filename_hint)) as parts:
        header = next(parts)
    assert isinstance(header, DocumentHeader)
    return header


def test_title_hint_from_metadata_or_filename() -> None:
    assert _header("en_walden_thoreau_249p.pdf", "w.pdf").title_hint == "Walden"
    assert _header("multicolumn_2col_latex.pdf", "dir/multi.pdf").title_hint == "multi"


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
    with pytest.raises(BadRequest, match=r"unsupported type image/gif: supported are PDF, Word, .* and HEIC"):
        detect_content_type(b"GIF89a" + b"\x00" * 20)
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


def _pdf(pages: list[bytes], *, trailer_extra: bytes = b"", extra_objects: tuple[bytes, ...] = ()) -> bytes:
    """A small hand-made PDF (correct xref): one page per content stream; a stream may carry a /Filter."""
    n = len(pages)
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(n))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n)]
    font = 3 + 2 * n
    for i, stream in enumerate(pages):
        content, _, stream_extra = stream.partition(b"|")
        objs.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (4 + 2 * i, font)
        )
        objs.append(b"<< /Length %d %s>>\nstream\n%s\nendstream" % (len(content), stream_extra, content))
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objs.extend(extra_objects)
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objs) + 1,
        trailer_extra,
        xref,
    )
    return bytes(out)


def _text(words: str) -> bytes:
    return b"BT /F1 12 Tf 72 712 Td (%s) Tj ET" % words.encode()


def test_page_with_unsupported_filter_is_skipped_like_other_unreadable_pages() -> None:
    data = _pdf([_text("first page"), _text("second page") + b"|/Filter /FooDecode ", _text("third page")])
    with capture_logs() as logs:
        doc = read_document(data)
    assert [p.text.strip() for p in doc.pages] == ["first page", "", "third page"]
    assert [(e["page"], e["error"]) for e in logs if e["event"] == "pdf_page_unreadable"] == [
        (2, "NotImplementedError")
    ]


def test_pdf_whose_only_page_has_an_unsupported_filter_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="PDF features this reader does not support") as err:
        read_document(_pdf([_text("only page") + b"|/Filter /FooDecode "]))
    assert err.value.code == "bad_request"


def test_certificate_encryption_is_a_bad_request_that_says_decrypt() -> None:
    pubsec = b"<< /Filter /Adobe.PubSec /V 4 /R 4 /SubFilter /adbe.pkcs7.s5 /Length 128 >>"
    file_id = b"<00112233445566778899aabbccddeeff>"
    data = _pdf(
        [_text("secret")],
        trailer_extra=b"/Encrypt 6 0 R /ID [%s %s] " % (file_id, file_id),
        extra_objects=(pubsec,),
    )
    with pytest.raises(BadRequest, match=r"security handler this reader does not support.*qpdf --decrypt"):
        read_document(data)


def test_text_that_mentions_the_pdf_signature_stays_text() -> None:
    md = b"# File formats\n\nEvery PDF starts with a header such as `%PDF-1.7`, then objects.\n"
    assert detect_content_type(md, "formats.md") == "text/markdown"
    doc = read_document(md, filename_hint="formats.md")
    assert doc.content_type == "text/markdown" and doc.title_hint == "File formats"
    assert detect_content_type(b"notes: %PDF-1.4 is old\n") == "text/plain"


def test_pdf_after_leading_junk_is_still_read() -> None:
    real = (PDF_DIR / "ar_habibi.pdf").read_bytes()
    for junk, name in ((b"\x00\x01\xfe junk from a mail gateway\n", None), (b"HTTP junk\r\n\r\n", "x.pdf")):
        assert detect_content_type(junk + real, name) == "application/pdf"
        assert "habibi" in read_document(junk + real, filename_hint=name).pages[0].text


def test_oversized_text_is_a_bad_request_before_any_chunking() -> None:
    from hearthnet.services.rag.ingest.read import MAX_TEXT_BYTES

    data = b"alpha beta gamma delta. " * (MAX_TEXT_BYTES // 24 + 1)
    with pytest.raises(BadRequest, match=r"MiB of text are supported: split it"):
        read_document(data, filename_hint="big.txt")
    assert read_document(data[:MAX_TEXT_BYTES], filename_hint="ok.txt").page_count == 1


def test_a_reindex_rereads_text_over_the_cap_that_an_older_version_accepted() -> None:
    from hearthnet.services.rag.ingest.read import MAX_TEXT_BYTES, DocumentHeader, PageText, stream_document

    data = b"alpha beta gamma delta. " * (MAX_TEXT_BYTES // 24 + 1)
    parts = list(stream_document(data, filename_hint="big.txt", max_text_bytes=None))
    assert isinstance(parts[0], DocumentHeader)
    assert [p.page for p in parts[1:] if isinstance(p, PageText)] == [1]


def test_lone_surrogates_from_a_pdfs_unicode_map_become_replacement_characters() -> None:
    """pypdf decodes ToUnicode maps with surrogatepass: '<D800>' would reach the embedder as a lone
    surrogate, which no UTF-8 encoder takes (msgpack, the tokenizer, ChromaDB): internal_error."""
    from hearthnet.services.rag.ingest.read import clean

    cleaned = clean("Hello \ud800world\udfff\r\n")
    assert cleaned == "Hello \ufffdworld\ufffd\n"
    cleaned.encode("utf-8")  # does not raise


def test_a_title_found_in_the_file_is_cut_to_the_length_a_caller_may_give() -> None:
    doc = read_document(("# " + "T" * 5000 + "\n\nbody text here\n").encode(), filename_hint="a.md")
    assert doc.title_hint == "T" * 1000


def _flate(content: bytes) -> bytes:
    return zlib.compress(content, 9) + b"|/Filter /FlateDecode "


def test_a_page_that_expands_to_more_text_than_any_real_page_is_a_bad_request() -> None:
    """A few KB of compressed content stream became millions of characters: 25 s and 465 MB to
    chunk one page, minutes of embedding."""
    bomb = _pdf([_text("a title page"), _flate(_text("a " * (MAX_PAGE_TEXT // 2 + 1000)))])
    assert len(bomb) < 8_000
    with pytest.raises(BadRequest, match=r"page 2 of the PDF yields .* characters of text"):
        read_document(bomb)
    fine = _pdf([_flate(_text("a " * (MAX_PAGE_TEXT // 2 - 1000)))])
    assert len(read_document(fine).pages[0].text) <= MAX_PAGE_TEXT


def test_a_pdf_whose_pages_add_up_to_too_much_text_is_a_bad_request_before_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reader_module, "MAX_PDF_TEXT", 50_000)
    page = _flate(_text("word " * 3_000))  # 15,000 characters each
    with pytest.raises(BadRequest, match=r"more than 50,000 characters of text by page 4 of 6: split it"):
        read_document(_pdf([page] * 6))
    assert len(read_document(_pdf([page] * 3)).pages) == 3


def test_a_page_needing_a_decoder_pypdf_lacks_is_skipped_not_an_internal_error() -> None:
    jbig2 = _text("scanned page") + b"|/Filter /JBIG2Decode "
    with capture_logs() as logs:
        doc = read_document(_pdf([_text("first page"), jbig2]))
    assert [p.text.strip() for p in doc.pages] == ["first page", ""]
    assert [(e["page"], e["error"]) for e in logs if e["event"] == "pdf_page_unreadable"] == [
        (2, "DependencyError")
    ]
    with pytest.raises(BadRequest, match="PDF features this reader does not support"):
        read_document(_pdf([jbig2]))


def test_only_pypdf_warnings_are_labelled_pypdf_and_others_are_not_swallowed() -> None:
    """A warning raised elsewhere while pypdf works (another thread, a stream collected) is not
    logged as ``pypdf_warning``: it is passed on as a warning of its own."""
    import warnings

    import anyio.streams.memory
    from pypdf.errors import PdfReadWarning

    with warnings.catch_warnings(record=True) as outer, capture_logs() as logs:
        warnings.simplefilter("always")
        with reader_module._pypdf_warnings_logged():  # what wraps each step of pypdf's work
            warnings.warn_explicit(
                "Unclosed <MemoryObjectSendStream at 7f00>",
                ResourceWarning,
                anyio.streams.memory.__file__,
                210,
            )
            warnings.warn("Multiple definitions in dictionary", PdfReadWarning, stacklevel=1)
    labelled = [e["message"] for e in logs if e["event"] == "pypdf_warning"]
    assert labelled == ["Multiple definitions in dictionary"]
    assert [str(w.message) for w in outer] == ["Unclosed <MemoryObjectSendStream at 7f00>"]
    assert outer[0].category is ResourceWarning


def _first_page(data: bytes, *, scans_ok: bool = False) -> PageText:
    with contextlib.closing(stream_document(data, scans_ok=scans_ok)) as parts:
        next(parts)
        page = next(parts)
    assert isinstance(page, PageText)
    return page


def test_a_page_without_text_is_scanned_only_when_it_draws_an_image() -> None:
    scan = _first_page((PDF_DIR / "scanned_image_only_no_text.pdf").read_bytes(), scans_ok=True)
    assert (scan.text, scan.scanned, scan.ocr) == ("", True, False)
    cover = _first_page((PDF_DIR / "en_walden_thoreau_249p.pdf").read_bytes())  # an image, a few spaces
    assert cover.scanned and not cover.text.strip()
    pages = read_document((PDF_DIR / "fr_chelsea_transport_plan.pdf").read_bytes()).pages
    assert [p.page for p in pages if not p.text.strip()] == [4]  # an empty content stream: blank
    assert not any(p.scanned for p in pages)
    inline = b"q 100 0 0 100 72 600 cm BI /W 2 /H 1 /CS /G /BPC 8 ID \x00\xff EI Q"
    doc = read_document(_pdf([_text("first page"), inline, b"0 0 m 100 100 l S"]))
    assert [p.scanned for p in doc.pages] == [False, True, False]  # a drawn line is no scan
    unparsed = read_document(_pdf([_text("first page"), _text("x") + b"|/Filter /JBIG2Decode "]))
    assert unparsed.pages[1].scanned  # pypdf could not read it: PDFium may render it


def test_a_pdf_without_any_text_layer_is_left_to_ocr_only_when_asked_and_it_has_a_scan() -> None:
    data = (PDF_DIR / "scanned_image_only_no_text.pdf").read_bytes()
    header, page = list(stream_document(data, scans_ok=True))
    assert isinstance(header, DocumentHeader) and header.page_count == 1
    assert isinstance(page, PageText) and page.scanned
    with pytest.raises(BadRequest, match="no text layer on any of 1 pages: run OCR first"):
        list(stream_document(data))
    blank = _pdf([b"", b"0 0 m 100 100 l S"])  # nothing OCR could read: refused as before
    with pytest.raises(BadRequest, match="no text layer on any of 2 pages: run OCR first"):
        list(stream_document(blank, scans_ok=True))
    assert ocr_page_text(3, "a\r\nb\x00c") == PageText(page=3, text="a\nbc", ocr=True)


def test_a_pdf_left_half_read_does_not_hold_up_another_pdfs_reading() -> None:
    """An ingest's reader waits between pages (for the embedder, for OCR of a scan): meanwhile
    another thread reads another PDF, warnings still logged."""
    long_pdf = stream_document((PDF_DIR / "en_walden_thoreau_249p.pdf").read_bytes())
    read: list[int] = []
    with contextlib.closing(long_pdf):
        next(long_pdf), next(long_pdf)  # its header and first page: the generator is suspended
        other = threading.Thread(
            target=lambda: read.append(read_document((PDF_DIR / "ar_habibi.pdf").read_bytes()).page_count),
            daemon=True,
        )
        other.start()
        other.join(timeout=30)
        assert read == [1], "the other PDF waited for the first to be read to its end"
        with capture_logs() as logs, pytest.raises(BadRequest):
            read_document((PDF_DIR / "malformed_broken_page_tree.pdf").read_bytes())
        assert any(e["event"] == "pypdf_warning" for e in logs)
        assert isinstance(next(long_pdf), PageText)  # and the first goes on where it was
