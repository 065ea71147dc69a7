"""``rag.ingest`` of scanned PDF pages: read off their image by ``ocr.page`` over the bus.

One in-process node as in ``tests/unit/services/rag/test_service.py`` (real bus, MiniLM, ChromaDB,
blob store), with the real OCR service (RapidOCR) registered on its bus or not.  The pages are
those of the shared scanned PDF, the demo's heating handbook and a blank page of a shared PDF.
The tests in which the engine reads a page are in ``tests/documents/services/rag/ingest/test_ocr.py``.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from hearthnet.errors import BadRequest
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.ocr.engine import OcrEngine
from hearthnet.services.ocr.service import OcrService
from tests.shared_data import PDF_DIR
from tests.unit.services.rag.test_service import Node, node

SCANNED = PDF_DIR / "scanned_image_only_no_text.pdf"
BLANK = (PDF_DIR / "fr_chelsea_transport_plan.pdf", 4)
"""A page with an empty content stream: nothing drawn, nothing for OCR to read."""
DEMO = Path(__file__).resolve().parents[5] / "hearthnet" / "demo"
JIM = "Who was sitting in the kitchen door?"
REF = "ocr.page@1.0"


@asynccontextmanager
async def node_with_ocr(
    root: Path, minilm: OnnxModel, engine: OcrEngine
) -> AsyncIterator[tuple[Node, OcrService]]:
    """The RAG node with ``ocr.page`` of its own (one page at a time, the default)."""
    async with node(root, minilm=minilm) as n:
        ocr = OcrService(bus=n.bus, blobs=n.blobs, engine=engine)
        await ocr.start()
        for reg in ocr.registrations():
            n.bus.register(reg)
        yield n, ocr


def pdf_of(*pages: tuple[Path, int]) -> bytes:
    """A real PDF made of real pages of other PDFs (1-based page numbers)."""
    writer = PdfWriter()
    for path, number in pages:
        writer.add_page(PdfReader(path).pages[number - 1])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.anyio
async def test_with_no_ocr_provider_the_scan_is_refused_as_before(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        doc_cid = n.blobs.put_bytes(SCANNED.read_bytes()).doc_cid
        with pytest.raises(BadRequest, match="no text layer on any of 1 pages: run OCR first"):
            await n.ingest("books", doc_cid, filename="huck.pdf")
        assert "books" not in n.store.corpora()


@pytest.mark.anyio
async def test_a_blank_pdf_is_refused_as_before_even_with_ocr(
    tmp_path: Path, minilm: OnnxModel, engine: OcrEngine
) -> None:
    async with node_with_ocr(tmp_path, minilm, engine) as (n, ocr):
        doc_cid = n.blobs.put_bytes(pdf_of(BLANK)).doc_cid
        with pytest.raises(BadRequest, match="no text layer on any of 1 pages: run OCR first"):
            await n.ingest("books", doc_cid, filename="blank.pdf")
        assert ocr.pages == 0


@pytest.mark.anyio
async def test_a_caller_cannot_claim_ocr_in_its_metadata(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        doc_cid = n.put("# Notes\n\nThe well pump is checked every spring by the water committee.\n")
        with pytest.raises(BadRequest, match="'ocr' is reserved"):
            await n.ingest("house", doc_cid, filename="notes.md", metadata={"ocr": True})
