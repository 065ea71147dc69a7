"""``rag.ingest`` of a mixed PDF whose scanned page is read by the real OCR engine over the bus,
while another caller holds the only OCR slot; then the page is found by a question and read again
by a reindex; and a scan OCR finds no text on.  The node and helpers are those of
``tests/unit/services/rag/ingest/test_ocr.py``."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest
from PIL import Image

from hearthnet.contracts.ocr import OcrClient
from hearthnet.errors import BadRequest
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.ocr.engine import OcrEngine
from tests.polling import wait_until
from tests.unit.services.rag.ingest.test_ocr import BLANK, DEMO, JIM, REF, SCANNED, node_with_ocr, pdf_of
from tests.unit.services.rag.test_service import Ctx, Frame


@pytest.mark.anyio
async def test_only_the_scanned_page_goes_to_ocr_once_it_is_free_and_a_question_finds_it(
    tmp_path: Path, minilm: OnnxModel, engine: OcrEngine
) -> None:
    async with node_with_ocr(tmp_path, minilm, engine) as (n, ocr):
        mixed = pdf_of((DEMO / "heating_handbook.pdf", 1), (SCANNED, 1), BLANK)
        doc_cid = n.blobs.put_bytes(mixed).doc_cid
        scan_cid = n.blobs.put_bytes(SCANNED.read_bytes()).doc_cid
        stats = n.bus.stats.get(REF)
        frames: list[Frame] = []

        async def seen(frame: Frame) -> None:
            frames.append(frame)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:  # another caller holds the only OCR slot
                tg.start_soon(lambda: OcrClient(n.bus).page_text(scan_cid, 1, provider=None, timeout=60))
                await wait_until(lambda: stats.in_flight == 1, timeout=30)
                out, meta = await n.ingest("house", doc_cid, filename="mixed.pdf", on_frame=seen)
        assert stats.errors_by_code.get("capacity_exceeded", 0) >= 1  # the ingest was refused, then waited
        assert out["ocr_pages"] == [2] and meta["pages"] == 3
        assert ocr.pages == 2  # the other caller's page and page 2: never the text page 1 nor blank page 3
        assert [f for f in frames if f["stage"] == "ocr"] == [
            {"stage": "ocr", "current": 1, "total": 3, "page": 2}
        ]
        stages = [f["stage"] for f in frames]
        assert stages.index("ocr") < stages.index("embed")  # the page is read before it is embedded
        boiler = (await n.query("house", query="When is the gas boiler serviced?", k=1))["chunks"][0]
        assert boiler["metadata"]["page"] == 1 and "ocr" not in boiler["metadata"]
        scan = (await n.query("house", query=JIM, k=1))["chunks"][0]
        assert "Jim, was setting in the kitchen door" in scan["text"]
        assert scan["metadata"]["page"] == 2 and scan["metadata"]["ocr"] is True
        # a reindex re-reads the source: the scan goes to OCR again and keeps its chunks
        reindexed = await n.call("rag.reindex", Ctx("rag.reindex", {}, {"corpus": "house"}))
        assert reindexed["docs"] == 1 and ocr.pages == 3
        again = (await n.query("house", query=JIM, k=1))["chunks"][0]
        assert again["metadata"]["chunk_id"] == scan["metadata"]["chunk_id"] and again["metadata"]["ocr"]


@pytest.mark.anyio
async def test_a_scan_on_which_ocr_finds_no_text_is_a_clear_bad_request(
    tmp_path: Path, minilm: OnnxModel, engine: OcrEngine
) -> None:
    gray = io.BytesIO()
    Image.new("L", (400, 300), 200).save(gray, "PDF")  # a real PDF: one image, nothing written on it
    async with node_with_ocr(tmp_path, minilm, engine) as (n, ocr):
        doc_cid = n.blobs.put_bytes(gray.getvalue()).doc_cid
        with pytest.raises(BadRequest, match="1 of its 1 pages have no text layer and OCR found no text"):
            await n.ingest("books", doc_cid, filename="gray.pdf")
        assert ocr.pages == 1 and "books" not in n.store.corpora()
