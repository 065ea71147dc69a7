"""Documents read where the reading can be stopped: a worker process per document, with limits.

Every format with a parser (PDF and each reader of :mod:`.readers`)
is read by :func:`read_parts` in a worker process of a
:class:`~hearthnet.runtime.worker_processes.WorkerProcesses` pool: bytes in, the header and the
pages out, one frame each, as they are read.  The worker runs under a CPU-time limit derived
from the document's size and an address-space limit (:class:`~.limits.ReadLimits`); the
caller's :class:`~hearthnet.runtime.worker_processes.Stop` kills it when the caller's deadline
passes or it is cancelled.  Plain text (:data:`~.read.IN_PROCESS_TYPES`: no parser,
at most ``MAX_TEXT_BYTES``) are read in this process.  What the parent does with the pages
(chunking, OCR of scanned pages through ``ocr.page``, embedding) stays in the parent.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from typing import Any

import structlog

from hearthnet.runtime.worker_processes import Stop, WorkerProcesses
from hearthnet.services.rag.ingest.limits import ReadLimits
from hearthnet.services.rag.ingest.read import (
    IN_PROCESS_TYPES,
    MAX_TEXT_BYTES,
    DocumentHeader,
    PageText,
    detect_content_type,
    stream_document,
)
from hearthnet.services.rag.ingest.readers.common import Attachment

__all__ = ["DocumentReaders", "read_parts"]

log = structlog.get_logger("hearthnet.rag.reader")

Parts = Generator[DocumentHeader | PageText | Attachment, None, None]

_TARGET = "hearthnet.services.rag.ingest.isolated:read_parts"


def read_parts(
    data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool, limits: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """In the worker: :func:`~.read.stream_document`'s parts as plain dicts (the frames sent back)."""
    parts = stream_document(
        data,
        filename_hint=filename_hint,
        max_text_bytes=max_text_bytes,
        scans_ok=scans_ok,
        limits=ReadLimits.from_wire(limits),
    )
    with contextlib.closing(parts):
        for part in parts:
            if isinstance(part, DocumentHeader):
                yield {"header": [part.content_type, part.title_hint, part.page_count]}
            elif isinstance(part, Attachment):
                yield {"attachment": [part.filename, part.data]}
            else:
                place = [list(item) for item in part.place]
                marks = [list(m) for m in part.marks]
                yield {"page": [part.page, part.text, part.scanned, place, marks, part.mark]}


def _forward(level: str, fields: dict[str, Any]) -> None:
    """A worker's log record, written here (its records are summarised there already)."""
    event = str(fields.pop("event", "worker_log"))
    fields.pop("log_level", None)
    method = getattr(log, level, None)
    if level not in ("debug", "info", "warning", "error") or method is None:
        method = log.info
    method(event, worker=True, **fields)


def default_processes() -> int:
    """Documents read at once: one per core, at most two (reading competes with queries for CPU)."""
    return max(1, min(2, os.cpu_count() or 1))


class DocumentReaders:
    """Reads documents for the ingest: each parsed format in a worker process, text here."""

    def __init__(
        self, *, processes: int | None = None, limits: ReadLimits | None = None, warm: int = 1
    ) -> None:
        self.limits = limits or ReadLimits()
        self.pool = WorkerProcesses(
            "rag-read",
            processes=processes or default_processes(),
            memory_bytes=self.limits.memory_bytes,
            preload=("hearthnet.services.rag.ingest.isolated",),
            warm=warm,
            on_log=_forward,
        )

    def start(self) -> None:
        self.pool.prestart()

    def close(self) -> None:
        self.pool.close()

    def reader(self, stop: Stop) -> _StoppableReader:
        """A :data:`~.document.ReadParts` whose workers ``stop`` kills."""
        return _StoppableReader(self, stop)


class _StoppableReader:
    def __init__(self, readers: DocumentReaders, stop: Stop) -> None:
        self._readers = readers
        self._stop = stop

    def __call__(
        self,
        data: bytes,
        *,
        filename_hint: str | None,
        max_text_bytes: int | None = MAX_TEXT_BYTES,
        scans_ok: bool = False,
    ) -> Parts:
        """The parts of ``data`` (blocking: from a worker thread), as :func:`~.read.stream_document`."""
        if len(data) == 0 or detect_content_type(data, filename_hint) in IN_PROCESS_TYPES:
            return stream_document(
                data, filename_hint=filename_hint, max_text_bytes=max_text_bytes, scans_ok=scans_ok
            )
        return self._isolated(data, filename_hint, max_text_bytes, scans_ok)

    def _isolated(
        self, data: bytes, filename_hint: str | None, max_text_bytes: int | None, scans_ok: bool
    ) -> Parts:
        limits = self._readers.limits
        items = self._readers.pool.run(
            _TARGET,
            {
                "data": data,
                "filename_hint": filename_hint,
                "max_text_bytes": max_text_bytes,
                "scans_ok": scans_ok,
                "limits": limits.to_wire(),
            },
            cpu_seconds=limits.cpu_for(len(data)),
            stop=self._stop,
            what="reading the document",
        )
        with contextlib.closing(items):
            for item in items:
                if "attachment" in item:
                    filename, data = item["attachment"]
                    yield Attachment(str(filename), bytes(data))
                elif "header" in item:
                    content_type, title_hint, page_count = item["header"]
                    yield DocumentHeader(content_type, title_hint, int(page_count))
                else:
                    page, text, scanned, place, marks, mark = item["page"]
                    yield PageText(
                        page=int(page),
                        text=text,
                        scanned=bool(scanned),
                        place=tuple((str(k), v) for k, v in place),
                        marks=tuple((int(o), int(n)) for o, n in marks),
                        mark=str(mark),
                    )
