"""Every format of the registry read by its library (issue 35 item 1): documents made by those
libraries from the shared Walden text (:mod:`tests.format_documents`), each chunk carrying its
place; broken, encrypted and oversized files of each format refused with one clear line."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.contracts import formats
from hearthnet.contracts.formats import place_of
from hearthnet.errors import BadRequest
from hearthnet.runtime.worker_processes import stopped_at
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.ingest.chunk import chunk_document
from hearthnet.services.rag.ingest.isolated import DocumentReaders
from hearthnet.services.rag.ingest.read import (
    DocumentHeader,
    PageText,
    detect_content_type,
    read_document,
    stream_document,
)
from hearthnet.services.rag.ingest.readers import common
from tests.format_documents import MAKERS, TARGET, make, passages

TEXTUAL = [name for name in MAKERS if not formats.by_name(name).image]
IMAGES = [name for name in MAKERS if formats.by_name(name).image]


def _best(chunks: list[Chunk]) -> Chunk:
    """The chunk holding most of the target passage's words."""
    target = set(passages()[TARGET].split())
    return max(chunks, key=lambda c: len(set(c.text.split()) & target))


@pytest.mark.parametrize("name", TEXTUAL)
def test_each_format_is_read_and_its_chunks_say_where_they_are(name: str, tmp_path: Path) -> None:
    made = make(name, tmp_path)
    data = made.path.read_bytes()
    fmt = formats.by_name(name)
    assert detect_content_type(data, made.path.name) == fmt.content_type
    doc = read_document(data, filename_hint=made.path.name)
    assert doc.content_type == fmt.content_type
    chunks = chunk_document(
        doc, doc_cid="blake3:" + "0" * 64, doc_title="Walden", language="en", max_tokens=256
    )
    best = _best(chunks)
    assert made.phrase in " ".join(c.text for c in chunks)
    assert {k: best.metadata.get(k) for k in made.metadata} == made.metadata
    assert place_of(best.metadata) == made.place
    every = " ".join(c.text for c in chunks)
    for passage in passages():  # nothing lost
        assert passage[:80] in every, (name, passage[:40])
    if "navigation" in made.extra:  # a web page's main text only
        assert made.extra["navigation"] not in every and "Log in" not in every


def test_the_file_name_or_the_bytes_decide_the_format(tmp_path: Path) -> None:
    docx = make("docx", tmp_path).path.read_bytes()
    assert detect_content_type(docx, "renamed.bin") == formats.DOCX.content_type  # by its container
    html = make("html", tmp_path).path.read_bytes()
    assert detect_content_type(html, None) == formats.HTML.content_type  # by its start
    assert detect_content_type(b"a,b\n1,2\n", "x.csv") == formats.CSV.content_type
    assert detect_content_type(b"a,b\n1,2\n", "x.txt") == formats.TEXT.content_type


@pytest.mark.parametrize("name", IMAGES)
def test_an_image_is_a_page_for_ocr_and_refused_without_it(name: str, tmp_path: Path) -> None:
    made = make(name, tmp_path)
    data = made.path.read_bytes()
    fmt = formats.by_name(name)
    assert detect_content_type(data, "no-suffix") == fmt.content_type
    parts = list(stream_document(data, filename_hint=made.path.name, scans_ok=True))
    assert parts == [
        DocumentHeader(fmt.content_type, "letter", 1),
        PageText(page=1, text="", scanned=True),
    ]
    with pytest.raises(
        BadRequest, match=f"a {fmt.label} image is read by OCR, and no node .* offers ocr.page"
    ):
        read_document(data, filename_hint=made.path.name)


def _broken(name: str, data: bytes) -> bytes:
    """The file cut in half, or for a text format the damage it can have."""
    damaged = {
        "csv": b"a,b\x00\x00\x01\x02" * 10,
        "markdown": b"# Title\n\n\xff\xfe broken \xc3",
        "html": b"<html><body><nav>Home</nav></body></html>",
        "eml": b"this is not a message, it has no headers at all\n",
        "mbox": b"Subject: a message without its From line\n\nbody\n",
    }
    return damaged.get(name, data[: len(data) // 2])


_REFUSED = {
    "csv": "not a readable CSV file: it holds binary data",
    "markdown": "(binary, not UTF-8 text)",
    "html": "HTML file has no",
    "eml": "not a readable e-mail file: it has no message headers",
    "mbox": 'not a readable mbox file: it does not start with a "From " line',
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_broken_file_of_each_format_is_one_clear_line(name: str, tmp_path: Path) -> None:
    made = make(name, tmp_path)
    fmt = formats.by_name(name)
    data = _broken(name, made.path.read_bytes())
    with pytest.raises(BadRequest) as info:
        read_document(data, filename_hint=made.path.name)
    message = info.value.message
    assert "\n" not in message and len(message) < 300
    assert _REFUSED.get(name, f"not a readable {fmt.label}") in message


def _rezipped(data: bytes, replace: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, replace.pop(info.filename, src.read(info)))
        for extra, content in replace.items():
            dst.writestr(extra, content)
    return out.getvalue()


def test_encrypted_files_are_refused_before_they_are_parsed(tmp_path: Path) -> None:
    odt = make("odt", tmp_path).path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(odt)) as z:
        manifest = z.read("META-INF/manifest.xml")
    locked = manifest.replace(
        b'manifest:full-path="content.xml"',
        b'manifest:full-path="content.xml"><manifest:encryption-data manifest:checksum="x"/>'
        b'</manifest:file-entry><manifest:file-entry manifest:media-type="" manifest:full-path="x"',
    )
    assert locked != manifest
    with pytest.raises(BadRequest, match="OpenDocument text file is encrypted with a password"):
        read_document(_rezipped(odt, {"META-INF/manifest.xml": locked}), filename_hint="a.odt")
    # An encrypted Word, Excel or PowerPoint file is an OLE container under its own name.
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    for suffix, label in ((".docx", "Word"), (".xlsx", "Excel"), (".pptx", "PowerPoint")):
        with pytest.raises(BadRequest, match=f"{label} file is encrypted with a password"):
            read_document(ole, filename_hint="locked" + suffix)
    epub = make("epub", tmp_path).path.read_bytes()
    drm = (
        b'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        b'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
        b'<enc:CipherReference URI="EPUB/c2.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>'
    )
    with pytest.raises(BadRequest, match=r"EPUB file is encrypted \(DRM\)"):
        read_document(_rezipped(epub, {"META-INF/encryption.xml": drm}), filename_hint="a.epub")
    fonts_only = drm.replace(b"EPUB/c2.xhtml", b"EPUB/fonts/serif.otf")  # obfuscated fonts: readable
    assert read_document(_rezipped(epub, {"META-INF/encryption.xml": fonts_only}), filename_hint="a.epub")


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "MAX_UNPACKED_BYTES", 4 << 20)
    docx = make("docx", tmp_path).path.read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        dst.writestr("word/media/zeros.bin", bytes(5 << 20))
    assert len(out.getvalue()) < 100_000  # a few KB that unpack to megabytes
    with pytest.raises(
        BadRequest, match=r"Word file unpacks to [0-9,]+ bytes, more than 4,194,304: the file is damaged"
    ):
        read_document(out.getvalue(), filename_hint="bomb.docx")


def test_a_sheet_declaring_a_million_empty_rows_costs_no_work(tmp_path: Path) -> None:
    import odfdo

    d = odfdo.Document("spreadsheet")
    sheet = odfdo.Table("Sheet")
    sheet.set_values([["Name", "Age"], ["Ann", 40]])
    empty = odfdo.Row()
    empty.repeated = 1_000_000
    sheet.append(empty)
    last = odfdo.Row()
    last.set_values(["Ben", 41])
    sheet.append(last)
    d.body.append(sheet)
    out = io.BytesIO()
    d.save(out)
    doc = read_document(out.getvalue(), filename_hint="people.ods")
    page = doc.pages[-1]
    assert page.text.splitlines() == ["Name; Age", "Name: Ann; Age: 40", "Name: Ben; Age: 41"]
    assert [n for _, n in page.marks] == [1, 2, 1_000_003]  # rows numbered as the sheet numbers them


def test_too_much_text_is_refused_naming_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "MAX_PDF_TEXT", 1000)
    rows = b"name,notes\n" + b"".join(b"row%d,%s\n" % (i, b"words " * 10) for i in range(100))
    with pytest.raises(BadRequest, match="the CSV file yields more than 1,000 characters of text: split it"):
        read_document(rows, filename_hint="big.csv")


def test_every_format_in_the_registry_has_its_reader_and_reaches_the_doors() -> None:
    import importlib

    for fmt in formats.FORMATS:
        if fmt.reader is not None:
            module, function = fmt.reader.split(":")
            assert callable(getattr(importlib.import_module(f"{common.__package__}.{module}"), function))
        for suffix in fmt.suffixes:
            assert formats.by_suffix("x" + suffix.upper()) is fmt
            assert suffix in formats.accept()
        assert fmt.label in formats.supported_text()
    assert set(MAKERS) | {"pdf", "text"} == {f.name for f in formats.FORMATS}


@pytest.fixture
def readers() -> Iterator[DocumentReaders]:
    r = DocumentReaders(processes=1)
    try:
        yield r
    finally:
        r.close()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_formats_are_read_in_a_worker_process_places_and_refusals_included(
    readers: DocumentReaders, tmp_path: Path, anyio_backend: str
) -> None:
    made = make("xlsx", tmp_path)
    data = made.path.read_bytes()

    async def read(data: bytes, name: str) -> list[object]:
        async with stopped_at(anyio.current_time() + 300, "reading the document") as stop:
            reader = readers.reader(stop)
            return await anyio.to_thread.run_sync(lambda: list(reader(data, filename_hint=name)))

    parts = await read(data, made.path.name)
    assert parts[1:] == read_document(data, filename_hint=made.path.name).pages  # places came across
    assert readers.pool.idle_pids()  # read by a worker
    with pytest.raises(BadRequest, match="not a readable Excel file"):
        await read(data[: len(data) // 2], made.path.name)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_workbook_that_takes_too_long_meets_the_workers_cpu_limit(
    readers: DocumentReaders, tmp_path: Path, anyio_backend: str
) -> None:
    """The worker's limits hold for every format: a budget of a fraction of a CPU second ends
    the reading of a 40,000-row workbook (seconds of openpyxl's work) with the limit's refusal."""
    import openpyxl

    from hearthnet.services.rag.ingest.limits import ReadLimits

    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Rows")
    for i in range(40_000):
        sheet.append([f"row {i}", i, passages()[i % 6][:40]])
    path = tmp_path / "big.xlsx"
    book.save(str(path))
    readers.limits = ReadLimits(cpu_seconds=0.3, cpu_seconds_per_mib=0.0)
    async with stopped_at(anyio.current_time() + 300, "reading the document") as stop:
        reader = readers.reader(stop)
        with pytest.raises(BadRequest, match=r"CPU seconds \(the CPU-time limit\)"):
            await anyio.to_thread.run_sync(lambda: list(reader(path.read_bytes(), filename_hint="big.xlsx")))
