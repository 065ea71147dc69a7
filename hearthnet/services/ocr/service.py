"""``ocr.page@1.0`` (the contract: :mod:`hearthnet.contracts.ocr`) over an in-process engine.

One page at a time per slot: read, rendered, recognised and dropped in a worker thread under a
limiter of ``max_concurrent``; a blob not held here is fetched through ``file.fetch`` first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.blobs import BlobStore
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.contracts.ocr import CAPABILITY, VERSION, BlobPage, ImagePage, parse_ocr_input
from hearthnet.errors import BadRequest, InternalError, NotFound, Timeout
from hearthnet.services.ocr.engine import (
    OcrEngine,
    OcrUnavailable,
    Recognition,
    engine_label,
    find_model_files,
)
from hearthnet.services.ocr.pages import PDF, PageImage, kind_of, open_image, render_pdf_page

__all__ = ["MAX_BLOB_BYTES", "OcrService", "OcrSettings"]

MAX_BLOB_BYTES = 256 * 1024 * 1024
"""Bytes of a stored PDF or image read for one page (the blob store's own default bound)."""

log = structlog.get_logger("hearthnet.ocr")


@dataclass(frozen=True)
class OcrSettings:
    """What the node config decides about OCR."""

    max_concurrent: int = 1
    """Pages recognised at once; each holds its page image and the engine's working memory."""
    dpi: int = 200
    timeout_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if not 50 <= self.dpi <= 600:
            raise ValueError("dpi must be in 50..600")


class OcrService:
    """Serves ``ocr.page`` with an in-process RapidOCR engine, loaded on the first page."""

    name = "ocr"

    def __init__(
        self,
        *,
        bus: BusAPI,
        blobs: BlobStore,
        settings: OcrSettings | None = None,
        engine: OcrEngine | None = None,
    ) -> None:
        self._bus = bus
        self._blobs = blobs
        self.settings = settings or OcrSettings()
        self.engine = engine or OcrEngine()
        self._limiter = anyio.CapacityLimiter(self.settings.max_concurrent)
        self._io_limiter = anyio.CapacityLimiter(2)
        self._label = engine_label()
        self._unavailable: str | None = None
        self.pages = 0

    async def start(self) -> None:
        try:
            await anyio.to_thread.run_sync(find_model_files)
        except OcrUnavailable as exc:
            self._unavailable = exc.message
            log.warning("ocr unavailable; ocr.page not offered", reason=exc.message)

    async def stop(self) -> None:
        self.engine.unload()

    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self._unavailable is None,
            "engine": self._label,
            "loaded": self.engine.loaded,
            "pages": self.pages,
        }
        if self._unavailable is not None:
            out["unavailable"] = self._unavailable
        return out

    def registrations(self) -> list[Registration]:
        if self._unavailable is not None:
            return []
        s = self.settings
        return [
            Registration(
                descriptor=CapabilityDescriptor(
                    name=CAPABILITY,
                    version=VERSION,
                    params={"engine": self._label, "dpi": s.dpi},
                    max_concurrent=s.max_concurrent,
                    timeout_seconds=s.timeout_seconds,
                    idempotent=True,
                    description=f"text lines of a page image or a stored PDF page ({self._label})",
                ),
                handler=self._handle,
            )
        ]

    async def _handle(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        request = parse_ocr_input(ctx.input)
        started = time.perf_counter()
        if isinstance(request, BlobPage):
            await self._make_local(ctx, request.doc_cid)
        with anyio.move_on_after(ctx.remaining()) as scope:
            page, found = await anyio.to_thread.run_sync(self._recognise, request, limiter=self._limiter)
        if scope.cancelled_caught:
            raise Timeout(f"{CAPABILITY}: the page was not recognised before the call's deadline")
        self.pages += 1
        ms = round((time.perf_counter() - started) * 1000, 1)
        lines = [
            {
                "text": line.text,
                "box": [[round(x * page.scale), round(y * page.scale)] for x, y in line.box],
                "confidence": line.confidence,
            }
            for line in found.lines
        ]
        meta: dict[str, Any] = {
            "ms": ms,
            "engine": self._label,
            "dpi": page.dpi,
            "width": page.width,
            "height": page.height,
        }
        if isinstance(request, BlobPage):
            meta["page"] = request.page
            if page.page_count is not None:
                meta["page_count"] = page.page_count
        log.info(
            "ocr_page",
            trace_id=ctx.trace_id,
            doc_cid=request.doc_cid if isinstance(request, BlobPage) else None,
            page=request.page if isinstance(request, BlobPage) else None,
            lines=len(lines),
            ms=ms,
        )
        return {"text": found.text, "lines": lines}, meta

    async def _make_local(self, ctx: CallContext, doc_cid: str) -> None:
        """Have ``doc_cid`` here, fetched from a member if need be; a private blob is not here to a peer."""

        def state() -> tuple[bool, bool]:
            return self._blobs.check_held(doc_cid), self._blobs.is_private(doc_cid)

        held, private = await anyio.to_thread.run_sync(state, limiter=self._io_limiter)
        if private and not ctx.is_local:
            raise NotFound(f"this node does not hold {doc_cid}")  # as file.read answers a peer
        if held:
            return
        await self._bus.call(
            "file.fetch",
            (1, 0),
            input={"doc_cid": doc_cid, "hint": None if ctx.is_local else ctx.caller},
            provider=self._bus.node_id,
            timeout=max(1.0, ctx.remaining()),
        )

    def _recognise(self, request: ImagePage | BlobPage) -> tuple[PageImage, Recognition]:
        """Worker thread: decode or render the page, recognise it, keep nothing of it."""
        try:
            if isinstance(request, ImagePage):
                page = open_image(request.data)
            else:
                page = self._blob_page(request)
            return page, self.engine.recognise(page.image)
        except MemoryError as exc:
            raise InternalError("out of memory while recognising the page") from exc
        except OcrUnavailable as exc:
            raise InternalError(exc.message) from exc

    def _blob_page(self, request: BlobPage) -> PageImage:
        data = self._blobs.read_blob(request.doc_cid, max_bytes=MAX_BLOB_BYTES)
        kind = kind_of(data)
        if kind == PDF:
            return render_pdf_page(data, request.page, self.settings.dpi)
        if kind is None:
            raise BadRequest(f"{request.doc_cid} is neither a PDF nor a PNG, JPEG, TIFF or HEIC image")
        if request.page != 1:
            raise BadRequest(f"page {request.page} is out of range: {request.doc_cid} is an image (page 1)")
        return open_image(data, request.doc_cid, stored=True)
