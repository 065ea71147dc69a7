"""Documents read in worker processes with limits (issue 29): each limit refuses a hostile PDF with
a ``bad_request`` naming it, and a caller's deadline or cancellation kills the worker at once."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import anyio
import pytest

from hearthnet.errors import BadRequest, Timeout
from hearthnet.runtime.worker_processes import stopped_at
from hearthnet.services.rag.ingest.isolated import DocumentReaders
from hearthnet.services.rag.ingest.limits import ReadLimits
from hearthnet.services.rag.ingest.read import DocumentHeader, PageText
from tests.hostile_pdfs import TEXT_SHOWN, content_bomb
from tests.shared_data import PDF_DIR

pytestmark = pytest.mark.anyio


@pytest.fixture
def readers() -> Iterator[DocumentReaders]:
    r = DocumentReaders(processes=1)
    try:
        yield r
    finally:
        r.close()


async def _read(
    readers: DocumentReaders, data: bytes, *, deadline: float = 300.0, name: str = "x.pdf"
) -> list[object]:
    async with stopped_at(anyio.current_time() + deadline, "reading the document") as stop:
        read = readers.reader(stop)
        return await anyio.to_thread.run_sync(lambda: list(read(data, filename_hint=name)))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_real_pdf_is_read_in_a_worker_as_in_this_process(readers: DocumentReaders) -> None:
    from hearthnet.services.rag.ingest.read import read_document

    data = (PDF_DIR / "en_paper_creativity_in_ml.pdf").read_bytes()
    parts = await _read(readers, data)
    assert isinstance(parts[0], DocumentHeader)
    pages = [p for p in parts if isinstance(p, PageText)]
    assert [p.text for p in pages] == [p.text for p in read_document(data).pages]
    assert readers.pool.busy_pids() == [] and len(readers.pool.idle_pids()) == 1  # kept for the next


async def test_text_is_read_in_this_process(readers: DocumentReaders) -> None:
    parts = await _read(readers, b"Notes\n\nbasil likes sun\n", name="notes.txt")
    assert [type(p) for p in parts] == [DocumentHeader, PageText]
    assert readers.pool.idle_pids() == [] and readers.pool.busy_pids() == []  # no worker started


async def test_the_issue_29_bomb_is_refused_at_its_first_page_naming_the_limit(
    readers: DocumentReaders,
) -> None:
    """60 pages share one 20 MiB content stream (50 KB of PDF): 1.6 s of CPU a page, minutes."""
    bomb = content_bomb()
    assert len(bomb) < 60_000
    started = time.perf_counter()
    with pytest.raises(BadRequest, match=r"page 1 .*limit on inflated bytes per page"):
        await _read(readers, bomb)
    assert time.perf_counter() - started < 30  # one page's inflation, not sixty pages' work


async def test_inflated_bytes_per_document_are_bounded(readers: DocumentReaders) -> None:
    readers.limits = ReadLimits(document_inflated_bytes=4 << 20)
    with pytest.raises(BadRequest, match=r"by page 5 \(the limit on inflated bytes per document\)"):
        await _read(readers, content_bomb(pages=20, inflated=1 << 20, head=TEXT_SHOWN, unit=b"% pad\n"))


async def test_operators_per_page_are_bounded(readers: DocumentReaders) -> None:
    """Under the per-page byte limit, but 1.3 M operators to parse (the densest real page: 30 k)."""
    bomb = content_bomb(pages=3, inflated=5 << 20, head=TEXT_SHOWN, unit=b"q Q\n")
    with pytest.raises(BadRequest, match=r"page 1 .*limit on operators per page"):
        await _read(readers, bomb)


async def test_operators_per_document_are_bounded(readers: DocumentReaders) -> None:
    readers.limits = ReadLimits(document_operators=100_000)
    bomb = content_bomb(pages=10, inflated=120_000, head=TEXT_SHOWN, unit=b"q Q\n")  # 60 k a page
    with pytest.raises(BadRequest, match=r"by page 2 \(the limit on operators per document\)"):
        await _read(readers, bomb)


async def test_cpu_seconds_are_bounded_and_the_worker_replaced(readers: DocumentReaders) -> None:
    """Walden takes seconds of CPU to read: with a budget of one, the kernel ends the worker."""
    readers.limits = ReadLimits(cpu_seconds=0.5, cpu_seconds_per_mib=0.0)
    data = (PDF_DIR / "en_walden_thoreau_249p.pdf").read_bytes()
    with pytest.raises(BadRequest, match=r"CPU seconds \(the CPU-time limit\)"):
        await _read(readers, data)
    readers.limits = ReadLimits()
    parts = await _read(readers, (PDF_DIR / "ar_habibi.pdf").read_bytes())  # a new worker reads
    assert isinstance(parts[-1], PageText) and "habibi" in parts[-1].text


async def test_memory_is_bounded() -> None:
    limits = ReadLimits(memory_bytes=200 << 20, page_inflated_bytes=1 << 30, document_inflated_bytes=1 << 30)
    readers = DocumentReaders(processes=1, limits=limits)
    try:
        bomb = content_bomb(pages=1, inflated=70_000_000, head=TEXT_SHOWN, unit=b"%%%%%%%\n")
        with pytest.raises(BadRequest, match=r"MiB of memory a worker process may use \(the memory limit\)"):
            await _read(readers, bomb)
    finally:
        readers.close()


async def test_a_deadline_kills_the_worker_at_once(readers: DocumentReaders) -> None:
    """Within every per-page limit but slow (60 pages of 0.9 M operators each): the caller's
    deadline stops it, and the worker is gone, not left parsing."""
    bomb = content_bomb(pages=60, inflated=1_800_000, head=TEXT_SHOWN, unit=b"q Q\n")
    seen: list[int] = []

    async def watch() -> None:
        while not seen:
            seen.extend(readers.pool.busy_pids())
            await anyio.sleep(0.01)

    deadline = 3.0
    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        with pytest.raises(Timeout, match="did not finish within the call's deadline"):
            await _read(readers, bomb, deadline=deadline)
    late = anyio.current_time() - started - deadline
    assert -0.1 < late < 2.0, late
    assert seen and not _alive(seen[0])
    assert readers.pool.busy_pids() == []


async def test_a_cancelled_caller_kills_the_worker(readers: DocumentReaders) -> None:
    bomb = content_bomb(pages=60, inflated=12 << 20, unit=b"q Q\n")
    seen: list[int] = []
    with anyio.move_on_after(60):
        async with anyio.create_task_group() as tg:

            async def cancel_when_busy() -> None:
                while not seen:
                    seen.extend(readers.pool.busy_pids())
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()

            tg.start_soon(cancel_when_busy)
            await _read(readers, bomb)
    assert seen and not _alive(seen[0])
    assert readers.pool.busy_pids() == [] and os.getpid()
