"""Scanned PDF pages read off their image during an ingest: ``ocr.page`` over the bus.

:func:`ocr_route` and :meth:`OcrRoute.reader` decide once per document whether its scanned pages
(no text layer, an image drawn) can be read and by whom: any ``ocr.page`` provider, the bus
choosing this node's first, else a peer's (which fetches the PDF from this node); a private
blob's pages only ever go to this node's own OCR.  With none, the reader's "run OCR first"
refusal stands.  The :class:`ScanReader` is called from the reader's thread, one page at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.contracts.ocr import CAPABILITY, VERSION, OcrClient
from hearthnet.errors import BadRequest, CapacityExceeded, Timeout
from hearthnet.runtime.pace import Pace
from hearthnet.services.rag.ingest.embed import Progress

__all__ = ["OCR_PAGE_TIMEOUT", "PAGE_PACE", "OcrRoute", "ScanReader", "ocr_route"]

log = structlog.get_logger("hearthnet.rag.ingest")

OCR_PAGE_TIMEOUT = 120.0
"""The least one ``ocr.page`` call of an ingest is given (a page's deadline follows ``PAGE_PACE``)."""
PAGE_PACE = Pace(per_unit=30.0, floor=OCR_PAGE_TIMEOUT, slack=4.0)
"""Seconds a page takes each ``ocr.page`` provider, measured over this node's ingests (a slow
guess before the first page: a Raspberry Pi's CPU reads a dense page in ~20 s)."""
PAGE_RETRIES = 3
"""Times a page that overran its deadline is sent again (each time with the slower pace it showed)."""
BUSY_WAIT = 0.25
"""Seconds to wait for a free OCR slot when a busy provider gives no hint."""


class ScanReader:
    """Reads one document's scanned pages with ``ocr.page``; a :data:`~.document.PageOcr`.

    Called (blocking) from the reader's thread, which holds no shared slot (the page is at OCR
    for seconds, perhaps on another node).  After each page a progress frame ``{stage: ocr,
    current: pages read so far, total: page count, page}`` goes to ``progress``.
    """

    def __init__(
        self,
        client: OcrClient,
        doc_cid: str,
        *,
        provider: str | None,
        deadline: float,
        progress: Progress | None,
    ) -> None:
        self._client = client
        self._doc_cid = doc_cid
        self._provider = provider
        self._deadline = deadline
        self._progress = progress
        self.read = 0
        """Pages OCR found text on so far."""

    def __call__(self, page: int, pages: int) -> str | None:
        text = anyio.from_thread.run(self._page_text, page)
        if text is not None and text.strip():
            self.read += 1
        frame: dict[str, Any] = {"stage": "ocr", "current": self.read, "total": pages, "page": page}
        anyio.from_thread.run(self._report, frame)
        return text

    async def _report(self, frame: dict[str, Any]) -> None:
        if self._progress is not None:
            await self._progress(frame)

    async def _page_text(self, page: int) -> str | None:
        """The page's text, a busy OCR waited out within the deadline; ``None`` for a page OCR
        refuses (``bad_request``: it cannot render it), so the ingest goes on without it."""
        overruns = 0
        while True:
            remaining = self._deadline - anyio.current_time()
            workers = [self._provider or "any"]  # the bus picks the provider unless it is this node
            started = anyio.current_time()
            try:
                text = await self._client.page_text(
                    self._doc_cid,
                    page,
                    provider=self._provider,
                    timeout=max(0.1, min(PAGE_PACE.deadline(1, workers), remaining)),
                )
            except CapacityExceeded as exc:
                wait = (exc.retry_after_ms or BUSY_WAIT * 1000) / 1000
                if wait >= self._deadline - anyio.current_time():
                    raise
                await anyio.sleep(wait)  # every OCR slot is busy: come back when one should be free
                continue
            except Timeout:
                # A busy OCR: the page goes again with more time, while the ingest's own deadline allows.
                PAGE_PACE.overran(workers, 1, anyio.current_time() - started)
                overruns += 1
                if overruns > PAGE_RETRIES or anyio.current_time() >= self._deadline:
                    raise
                continue
            except BadRequest as exc:
                log.warning("ocr_page_unreadable", doc_cid=self._doc_cid, page=page, reason=exc.message[:200])
                return None
            PAGE_PACE.record(workers[0], 1, anyio.current_time() - started)
            return text


@dataclass(frozen=True)
class OcrRoute:
    """Who may read a document's scanned pages, from the registry as the ingest starts."""

    bus: BusAPI
    local: bool
    """This node serves ``ocr.page`` itself."""

    def reader(
        self,
        doc_cid: str,
        *,
        private: bool,
        deadline: float,
        progress: Progress | None,
    ) -> ScanReader | None:
        """A reader of ``doc_cid``'s scanned pages, or ``None`` when no OCR may read them: a
        private blob's pages go only to this node's own OCR, any other's the bus routes (this
        node's first, else the best peer's)."""
        if private and not self.local:
            return None
        return ScanReader(
            OcrClient(self.bus),
            doc_cid,
            provider=self.bus.node_id if private else None,
            deadline=deadline,
            progress=progress,
        )


def ocr_route(bus: BusAPI) -> OcrRoute | None:
    """The route to ``ocr.page`` (on the event loop), or ``None`` when no node of the mesh offers it."""
    providers = bus.providers(CAPABILITY, VERSION)
    if not providers:
        return None
    return OcrRoute(bus, local=any(p.is_local for p in providers))
