"""``ocr.page`` between in-process nodes: real buses over authenticated in-memory links, real blob
stores, the real engine and the real scanned PDFs.

A serves ``ocr.page`` (and files); B serves only files and calls A.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image

from hearthnet.blobs import BlobStore
from hearthnet.bus.bus import CapabilityBus
from hearthnet.community.levels import Level
from hearthnet.contracts.ocr import MAX_IMAGE_BYTES
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound, Timeout, Unauthorized
from hearthnet.identity import Identity
from hearthnet.services.file.service import FileService
from hearthnet.services.ocr.engine import OcrEngine
from hearthnet.services.ocr.pages import render_pdf_page
from hearthnet.services.ocr.service import OcrService, OcrSettings
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.polling import wait_until
from tests.shared_data import PDF_DIR

COMMUNITY = "hc1:test"
SCANNED = PDF_DIR / "scanned_image_only_no_text.pdf"
VICKSBURG = PDF_DIR / "scanned_with_ocr_text_layer.pdf"
REF = "ocr.page@1.0"


@pytest.fixture(scope="module")
def scanned_jpeg() -> bytes:
    """The scanned page rendered at 200 dpi, as a JPEG small enough to travel inline."""
    out = io.BytesIO()
    render_pdf_page(SCANNED.read_bytes(), 1, 200).image.save(out, "JPEG", quality=85)
    assert len(out.getvalue()) <= MAX_IMAGE_BYTES
    return out.getvalue()


@dataclass
class Node:
    bus: CapabilityBus
    store: BlobStore
    ocr: OcrService | None = None

    @property
    def id(self) -> str:
        return self.bus.node_id


@asynccontextmanager
async def mesh(
    tmp: Path, engine: OcrEngine, settings: OcrSettings | None = None
) -> AsyncIterator[dict[str, Node]]:
    ids = {"a": Identity.generate(), "b": Identity.generate()}
    levels = {i.node_id: Level.MEMBER for i in ids.values()}

    def admit(node_id: str) -> None:
        if node_id not in levels:
            raise Unauthorized("not a member")

    nodes: dict[str, Node] = {}
    for name, identity in ids.items():
        bus = CapabilityBus(identity, level_of=levels.get, community_id=lambda: COMMUNITY, name=name)
        store = BlobStore(tmp / name)
        node = Node(bus, store)
        for reg in FileService(bus=bus, store=store).registrations():
            bus.register(reg)
        if name == "a":
            node.ocr = OcrService(bus=bus, blobs=store, settings=settings, engine=engine)
            await node.ocr.start()
            for reg in node.ocr.registrations():
                bus.register(reg)
        nodes[name] = node
    a, b = nodes["a"].bus, nodes["b"].bus
    async with anyio.create_task_group() as tg:
        a_end, b_end = memory_stream_pair()
        links: dict[str, Any] = {}

        async def accept() -> None:
            links["b"] = await accept_link(
                b_end, identity=b.identity, community_id=COMMUNITY, admit=admit, remote_address="mem"
            )

        async with anyio.create_task_group() as hs:
            hs.start_soon(accept)
            links["a"] = await initiate_link(
                a_end, identity=a.identity, community_id=COMMUNITY, admit=admit, remote_address="mem"
            )
        tg.start_soon(a.attach, links["a"])
        tg.start_soon(b.attach, links["b"])
        tg.start_soon(a.run_announcer)
        tg.start_soon(b.run_announcer)
        await wait_until(lambda: any(not p.is_local for p in b.providers("ocr.page")))
        await wait_until(lambda: any(not p.is_local for p in a.providers("file.read")))
        try:
            yield nodes
        finally:
            tg.cancel_scope.cancel()
            for node in nodes.values():
                node.store.close()


async def ocr(caller: Node, input: dict[str, Any], **kw: Any) -> Any:
    return await caller.bus.call("ocr.page", input=input, timeout=kw.pop("timeout", 120.0), **kw)


@pytest.mark.anyio
async def test_an_inline_image_from_another_node_is_read(
    tmp_path: Path, engine: OcrEngine, scanned_jpeg: bytes
) -> None:
    async with mesh(tmp_path, engine) as n:
        result = await ocr(n["b"], {"image": scanned_jpeg})
        assert result.provider == n["a"].id
        out, meta = result.output, result.meta
        assert "Miss Watson" in out["text"] and "widow's garden" in out["text"]
        assert out["text"] == "\n".join(line["text"] for line in out["lines"])
        assert (meta["width"], meta["height"], meta["dpi"]) == (1067, 1309, None)
        assert meta["engine"].startswith("rapidocr-3.10.0/PP-OCRv6") and meta["ms"] > 0
        for line in out["lines"]:
            assert len(line["box"]) == 4 and all(len(corner) == 2 for corner in line["box"])
            assert 0.5 <= line["confidence"] <= 1.0


@pytest.mark.anyio
async def test_a_large_image_gets_boxes_in_its_own_pixels(tmp_path: Path, engine: OcrEngine) -> None:
    """Reduced to the engine's working size for recognition, reported in the caller's coordinates."""
    page = render_pdf_page(SCANNED.read_bytes(), 1, 200).image
    big = page.resize((page.width * 2, page.height * 2))  # 2134 x 2618: recognised at 1630 x 2000
    data = io.BytesIO()
    big.save(data, "JPEG", quality=60)
    async with mesh(tmp_path, engine) as n:
        small = (await ocr(n["a"], {"image": _jpeg(page)})).output["lines"]
        large = await ocr(n["a"], {"image": data.getvalue()})
    assert (large.meta["width"], large.meta["height"]) == (2134, 2618)
    first = next(line for line in small if "tip-toeing" in line["text"])
    twin = next(line for line in large.output["lines"] if "tip-toeing" in line["text"])
    # Same line, same place: centres within 1 % of the page (unscaled, they would be ~24 % off).
    (cx1, cy1), (cx2, cy2) = _centre(first["box"]), _centre(twin["box"])
    assert abs(2 * cx1 - cx2) <= 26 and abs(2 * cy1 - cy2) <= 26


def _centre(box: list[list[int]]) -> tuple[float, float]:
    return sum(x for x, _ in box) / 4, sum(y for _, y in box) / 4


def _jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85)
    return out.getvalue()


@pytest.mark.anyio
async def test_a_pdf_page_held_by_the_caller_is_fetched_then_read(tmp_path: Path, engine: OcrEngine) -> None:
    async with mesh(tmp_path, engine) as n:
        doc_cid = n["b"].store.put_bytes(VICKSBURG.read_bytes()).doc_cid
        assert not n["a"].store.has_blob(doc_cid)
        result = await ocr(n["b"], {"doc_cid": doc_cid, "page": 2})
        assert result.provider == n["a"].id and n["a"].store.has_blob(doc_cid)
        for words in ("Sibley Tent", "96th Ohio", "thirteen dollars", "magnanimous"):
            assert words in result.output["text"], words
        assert result.meta["page"] == 2 and result.meta["page_count"] == 6
        assert result.meta["dpi"] == 200.0 and (result.meta["width"], result.meta["height"]) == (1200, 1800)
        # the page without a text layer, held by the OCR node itself, page defaulting to 1
        scanned = n["a"].store.put_bytes(SCANNED.read_bytes()).doc_cid
        local = await ocr(n["a"], {"doc_cid": scanned})
        assert "Miss Watson" in local.output["text"] and local.meta["page"] == 1


@pytest.mark.anyio
async def test_a_blob_nobody_holds_is_not_found(tmp_path: Path, engine: OcrEngine) -> None:
    from hearthnet.blobs import blob_cid

    async with mesh(tmp_path, engine) as n:
        with pytest.raises(NotFound):
            await ocr(n["b"], {"doc_cid": blob_cid(b"never stored anywhere"), "page": 1})


@pytest.mark.anyio
async def test_a_private_blob_is_not_read_for_a_peer(tmp_path: Path, engine: OcrEngine) -> None:
    async with mesh(tmp_path, engine) as n:
        doc_cid = n["a"].store.put_bytes(SCANNED.read_bytes(), private=True).doc_cid
        with pytest.raises(NotFound, match="does not hold"):
            await ocr(n["b"], {"doc_cid": doc_cid}, provider=n["a"].id)
        assert "Miss Watson" in (await ocr(n["a"], {"doc_cid": doc_cid})).output["text"]


def _blob_inputs(store: BlobStore) -> dict[str, tuple[dict[str, Any], str]]:
    def put(path: Path | bytes) -> str:
        data = path if isinstance(path, bytes) else path.read_bytes()
        return store.put_bytes(data).doc_cid

    vicksburg = put(VICKSBURG)
    jpeg = put(_jpeg(Image.new("RGB", (200, 100), "white")))
    return {
        "page past the end": ({"doc_cid": vicksburg, "page": 7}, "page 7 is out of range: the PDF has 6"),
        "password": (
            {"doc_cid": put(PDF_DIR / "encrypted_password_openpassword.pdf"), "page": 1},
            "encrypted with a password",
        ),
        "corrupt pdf": ({"doc_cid": put(PDF_DIR / "corrupt_header_only.pdf")}, "not a readable PDF"),
        "not a pdf": (
            {"doc_cid": put(b"plain notes, not a page")},
            "neither a PDF nor a PNG, JPEG, TIFF",
        ),
        "image page 2": ({"doc_cid": jpeg, "page": 2}, "is an image \\(page 1\\)"),
    }


BAD_INPUTS: dict[str, tuple[dict[str, Any], str]] = {
    "nothing": ({}, "exactly one of image"),
    "both": ({"image": b"\x89PNG", "doc_cid": "blake3:" + "0" * 64}, "exactly one of image"),
    "unknown field": ({"image": b"x", "lang": "en"}, "unknown ocr.page input field"),
    "image as text": ({"image": "a string"}, "input.image must be bytes"),
    "empty image": ({"image": b""}, "empty"),
    "not an image": ({"image": b"hello, world"}, "neither PNG nor JPEG"),
    "a pdf as image": ({"image": SCANNED.read_bytes()}, "a PDF"),
    "truncated png": ({"image": b"\x89PNG\r\n\x1a\n\x00\x00"}, "not a readable PNG"),
    "too big": ({"image": b"\xff\xd8\xff" + bytes(MAX_IMAGE_BYTES)}, "file put"),
    "page with image": ({"image": b"\xff\xd8\xff", "page": 1}, "input.page goes with doc_cid"),
    "bad cid": ({"doc_cid": "blake3:xyz"}, "blob id"),
    "page 0": ({"doc_cid": "blake3:" + "0" * 64, "page": 0}, "page number from 1"),
    "page true": ({"doc_cid": "blake3:" + "0" * 64, "page": True}, "page number from 1"),
}


@pytest.mark.anyio
async def test_bad_input_is_a_bad_request_naming_what(tmp_path: Path, engine: OcrEngine) -> None:
    async with mesh(tmp_path, engine) as n:
        cases = {**BAD_INPUTS, **_blob_inputs(n["a"].store)}
        for name, (inp, fragment) in cases.items():
            with pytest.raises(BadRequest, match=fragment):
                await ocr(n["a"], inp)
            if name != "too big":  # over one frame: only the node's own callers can send it
                with pytest.raises(BadRequest, match=fragment):
                    await ocr(n["b"], inp, provider=n["a"].id)
        assert n["a"].ocr is not None and n["a"].ocr.pages == 0
        # and the service is still there for a good page
        assert "Miss Watson" in (await ocr(n["b"], {"image": _jpeg(_scanned())})).output["text"]


def _scanned() -> Image.Image:
    return render_pdf_page(SCANNED.read_bytes(), 1, 200).image


@pytest.mark.anyio
async def test_one_page_at_a_time_a_second_caller_hears_capacity_exceeded(
    tmp_path: Path, engine: OcrEngine, scanned_jpeg: bytes
) -> None:
    async with mesh(tmp_path, engine, OcrSettings(max_concurrent=1)) as n:
        a, b = n["a"], n["b"]
        assert a.bus.stats.get(REF).in_flight == 0
        results: list[Any] = []

        async def first() -> None:
            results.append(await ocr(a, {"image": scanned_jpeg}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await wait_until(lambda: a.bus.stats.get(REF).in_flight == 1, timeout=30)
            with pytest.raises(CapacityExceeded) as refused:
                await ocr(b, {"image": scanned_jpeg}, provider=a.id)
            assert refused.value.retry_after_ms is not None
        assert "Miss Watson" in results[0].output["text"]


@pytest.mark.anyio
async def test_a_deadline_shorter_than_a_page_is_a_timeout(
    tmp_path: Path, engine: OcrEngine, scanned_jpeg: bytes
) -> None:
    async with mesh(tmp_path, engine) as n:
        await ocr(n["a"], {"image": scanned_jpeg})  # engine loaded: the deadline is the page's alone
        with pytest.raises(Timeout):
            await ocr(n["b"], {"image": scanned_jpeg}, timeout=0.05)


@pytest.mark.anyio
async def test_the_descriptor_and_health(tmp_path: Path, engine: OcrEngine) -> None:
    async with mesh(tmp_path, engine, OcrSettings(max_concurrent=2, dpi=150)) as n:
        offered = next(p for p in n["b"].bus.providers("ocr.page") if not p.is_local)
        d = offered.descriptor
        assert (d.ref, d.max_concurrent, d.idempotent, d.trust_required) == (REF, 2, True, Level.MEMBER)
        assert d.params["dpi"] == 150 and str(d.params["engine"]).startswith("rapidocr-")
        assert n["a"].ocr is not None and n["a"].ocr.health()["ok"] is True
