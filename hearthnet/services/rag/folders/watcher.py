"""One watched folder kept in step with its corpus: a pass compares the disk with the watcher's
state and carries the differences to the corpus (:mod:`.apply`); file-system events (watchfiles)
start the next pass.

A pass reads only files that are new, changed (size or mtime) or still pending; a file is read
once it has settled: no event for it during its settle window (at least ``settle_seconds``, and
twice the longest gap seen between its events while it was being written), and its size and mtime
unchanged while it was hashed.  A file whose content hash is that of a file gone is a rename:
nothing is embedded again, only its source path follows.  A changed file's new version replaces
the old one in one store swap (``rag.ingest`` ``replaces``).  A gone file's document is deleted
unless another file of the folder has the same content.  The first pass after a start also asks
the corpus which documents it holds, so a document lost there is ingested again.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog
import watchfiles

from hearthnet.contracts.folders import MAX_FAILED_SHOWN
from hearthnet.errors import BusError
from hearthnet.runtime.blocking import run_blocking
from hearthnet.services.rag.folders.apply import CorpusWriter, Outcome, ToIngest
from hearthnet.services.rag.folders.rules import read_ignore
from hearthnet.services.rag.folders.scan import Plan, hash_file, plan, walk
from hearthnet.services.rag.folders.state import FAILED, INDEXED, PENDING, FileRow, FolderState, Stat

__all__ = ["FolderWatch", "WatchSettings"]

log = structlog.get_logger("hearthnet.rag.folders")


@dataclass(frozen=True)
class WatchSettings:
    settle_seconds: float = 1.0
    """The least time a file must go without an event before it is read."""
    settle_max_seconds: float = 60.0
    batch: int = 32
    """Files one ``rag.ingest`` carries (a first scan goes batch by batch: background work), as
    ``hearthnet ingest`` sends them."""
    batch_file_bytes: int = 256 * 1024
    """Files up to this size go in batches; a larger one (a book) is ingested alone."""
    retry_seconds: float = 30.0
    """When a file refused for a transient reason (a busy or absent host) is tried again."""
    walk_share: float = 0.1
    """The most of its time a watcher spends walking its folder: a pass reads the whole tree, so
    one starts no sooner than the last walk's time divided by this after the one before (a
    download writing for minutes, an event every 100 ms, would otherwise have a 10,000-file folder
    walked back to back: a core on a Pi)."""


def pass_spacing(walk_seconds: float, settings: WatchSettings) -> float:
    """The least time from one pass's start to the next's, after a walk of ``walk_seconds``
    (at most ``settle_max_seconds``: a huge folder is still looked at every minute)."""
    return min(settings.settle_max_seconds, walk_seconds / settings.walk_share)


@dataclass
class _Seen:
    """What one pass has learnt so far: the gone files' contents not claimed by a rename yet, the
    indexed files left alone, the contents ingested and every content read."""

    gone_by_cid: dict[str | None, str]
    present: dict[str, str | None]
    lost: set[str]
    indexed: set[str] = field(default_factory=set)
    read: dict[str | None, str] = field(default_factory=dict)
    """Each content read this pass, and a file that has it."""

    def holders(self) -> dict[str | None, str]:
        """Each content still in the folder, and the first file (by path) that has it."""
        out: dict[str | None, str] = {}
        for rel, cid in [*self.present.items(), *((r, c) for c, r in self.read.items())]:
            if cid not in out or rel < out[cid]:
                out[cid] = rel
        return out


class FolderWatch:
    """One folder: its passes, its events, and what ``watch list`` shows of it."""

    def __init__(
        self,
        root: Path,
        corpus: str,
        *,
        state: FolderState,
        writer: CorpusWriter,
        threads: anyio.CapacityLimiter,
        settings: WatchSettings,
        may_write: Callable[[], Awaitable[None]],
    ) -> None:
        self.root = root
        self.key = str(root)
        self.corpus = corpus
        self._state = state
        self._writer = writer
        self._threads = threads
        self._settings = settings
        self._may_write = may_write
        self._wake = anyio.Event()
        self._events: dict[str, float] = {}
        self._gaps: dict[str, float] = {}
        self._reconciled = False
        self.label = "scanning"
        self.reason: str | None = None
        self.scan: tuple[int, int] | None = None
        self.walk_seconds = 0.0
        """What the last pass took to walk the folder and read the state."""
        self.pass_started = 0.0
        """When the last pass began (``anyio.current_time``)."""
        self._dropped_at: float | None = None
        """When gone files' rows were last dropped (a change no row keeps a time of)."""
        self.passes = 0
        self.passed = anyio.Event()
        """Set (and replaced) at the end of each pass: what a test or a caller waits on."""

    def poke(self) -> None:
        """Run a pass soon (a change, a membership change)."""
        self._wake.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            while True:
                self._wake = anyio.Event()
                started = self.pass_started = anyio.current_time()
                due = await self._pass_once()
                passed, self.passed = self.passed, anyio.Event()
                self.passes += 1
                passed.set()
                with anyio.move_on_after(math.inf if due is None else due):
                    await self._wake.wait()
                # events meanwhile are noted (their files' settle windows): the next pass sees them
                rest = started + pass_spacing(self.walk_seconds, self._settings) - anyio.current_time()
                if rest > 0:
                    await anyio.sleep(rest)

    # events -------------------------------------------------------------------------------------
    async def _watch(self) -> None:
        """File-system events: each touched file's time noted (its settle window), a pass poked."""
        while True:
            try:
                async for changes in watchfiles.awatch(
                    self.root, watch_filter=None, debounce=100, step=20, recursive=True
                ):
                    self._noted(changes)
            except (OSError, RuntimeError) as exc:  # the folder vanished (an unplugged disk)
                log.info("folder_watch_stopped", folder=self.key, error=type(exc).__name__)
            self.poke()
            await anyio.sleep(self._settings.retry_seconds)  # it may come back

    def _noted(self, changes: set[tuple[watchfiles.Change, str]]) -> None:
        now = anyio.current_time()
        for _change, path in changes:
            try:
                rel = Path(path).relative_to(self.root).as_posix()
            except ValueError:
                continue
            before = self._events.get(rel)
            if before is not None and now - before < self._settings.settle_max_seconds:
                self._gaps[rel] = max(self._gaps.get(rel, 0.0), now - before)
            self._events[rel] = now
        self.poke()

    def _settles_in(self, rel: str, now: float) -> float:
        """Seconds until ``rel`` has settled (0: it has)."""
        last = self._events.get(rel)
        if last is None:
            return 0.0
        window = min(
            self._settings.settle_max_seconds,
            max(self._settings.settle_seconds, 2 * self._gaps.get(rel, 0.0)),
        )
        return max(0.0, last + window - now)

    # a pass --------------------------------------------------------------------------------------
    async def _pass_once(self) -> float | None:
        """One pass; seconds until the next is due (``None``: when an event says so)."""
        try:
            await self._may_write()
        except BusError as exc:
            self.label, self.reason = "refused", exc.message
            return None
        if not await run_blocking(self.root.is_dir, limiter=self._threads):  # an unplugged disk:
            self.label, self.reason = "missing", f"folder {self.root} is not there"  # documents stay
            return self._settings.retry_seconds
        self.reason = None
        self.label = "scanning" if not self._reconciled else "watching"
        try:
            return await self._pass()
        except BusError as exc:
            self.reason = exc.message
            log.warning("folder_pass_failed", folder=self.key, code=exc.code)
            return self._settings.retry_seconds
        except (OSError, sqlite3.Error) as exc:  # the disk or the state failing: this folder waits
            self.reason = f"the folder could not be scanned: {type(exc).__name__}: {exc}"[:500]
            log.warning(
                "folder_pass_failed", folder=self.key, code="internal_error", error=type(exc).__name__
            )
            return self._settings.retry_seconds
        finally:
            self.scan = None

    async def _pass(self) -> float | None:
        root = self.root

        def read() -> tuple[dict[str, Stat], dict[str, FileRow], float]:
            began = time.perf_counter()  # timed in the thread: not the wait for one
            disk = walk(root, read_ignore(root))
            return disk, self._state.files(self.key), time.perf_counter() - began

        disk, known, self.walk_seconds = await run_blocking(read, limiter=self._threads)
        todo = plan(disk, known)
        if not self._reconciled:
            await self._check_held(todo)
        now = anyio.current_time()
        ready: dict[str, Stat] = {}
        due: float | None = None
        for rel, st in todo.todo.items():
            wait = self._settles_in(rel, now)
            if wait > 0:
                due = wait if due is None else min(due, wait)
            else:
                ready[rel] = st
        await self._mark_pending(todo, known)
        log.info(  # counts only: what a pass read, left alone and found gone
            "folder_pass",
            folder=self.key,
            read=len(ready),
            unchanged=len(todo.unchanged),
            gone=len(todo.gone),
        )
        retry = await self._apply(ready, todo, known, settling=due is not None)
        self._reconciled = True
        self.label = "watching"
        old = now - self._settings.settle_max_seconds  # events that no window reaches any more
        for rel in [r for r, t in self._events.items() if t < old]:
            self._events.pop(rel, None)
            self._gaps.pop(rel, None)
        if retry is not None:
            due = retry if due is None else min(due, retry)
        return due

    async def _check_held(self, todo: Plan) -> None:
        """The first pass: an indexed file whose document the corpus no longer holds is to do."""
        held = await self._writer.held()
        if held is None:
            return
        for rel, row in list(todo.unchanged.items()):
            if row.status == INDEXED and row.doc_cid not in held:
                del todo.unchanged[rel]
                todo.todo[rel] = row.stat
                todo.lost.add(rel)

    async def _mark_pending(self, todo: Plan, known: dict[str, FileRow]) -> None:
        """Every file to do shows as pending (with the recorded content until it is read)."""
        now = time.time()
        rows = []
        for rel, st in todo.todo.items():
            old = known.get(rel)
            if old is None or old.status != PENDING:
                cid = old.doc_cid if old is not None else None
                rows.append(FileRow(rel, old.stat if old else st, cid, PENDING, None, now))
        if rows:
            await run_blocking(self._state.put, self.key, rows, limiter=self._threads)

    async def _apply(
        self, ready: dict[str, Stat], todo: Plan, known: dict[str, FileRow], *, settling: bool
    ) -> float | None:
        """Read the settled files batch by batch, each batch's renames recorded and its new and
        changed files ingested; then the deletes.  While a file is still settling no document is
        deleted: it may be a gone file's new name."""
        gone = dict(todo.gone)
        seen = _Seen(
            gone_by_cid={row.doc_cid: rel for rel, row in gone.items() if row.doc_cid is not None},
            present={rel: row.doc_cid for rel, row in todo.unchanged.items() if row.status == INDEXED},
            lost=todo.lost,
        )
        unstable = retry = False
        self.scan = (0, len(ready))
        rels = list(ready)
        for start in range(0, len(rels), self._settings.batch):
            hashed: dict[str, tuple[str, Stat]] = {}
            for rel in rels[start : start + self._settings.batch]:
                got = await run_blocking(hash_file, self.root / rel, limiter=self._threads)
                if got is None:
                    self._events[rel] = anyio.current_time()  # still being written: a later pass
                    unstable = True
                else:
                    hashed[rel] = got
                    self._gaps.pop(rel, None)  # its next burst of writes starts afresh
            ingests, done = self._resolve(hashed, known, seen)
            retry = await self._renames(done, gone) or retry
            retry = await self._ingest(ingests, known) or retry
            self.scan = (min(len(ready), start + self._settings.batch), len(ready))
        retry_gone = False
        if not (settling or unstable):
            retry_gone = await self._deletes(gone, seen.holders())
        if unstable or retry or retry_gone:
            return self._settings.settle_seconds if unstable else self._settings.retry_seconds
        return None

    def _resolve(
        self, hashed: dict[str, tuple[str, Stat]], known: dict[str, FileRow], seen: _Seen
    ) -> tuple[list[ToIngest], list[tuple[FileRow, str | None]]]:
        """Each read file: unchanged content (a touch), a rename of a gone file, a copy of an
        indexed one, or a document to ingest (replacing its previous version)."""
        ingests: list[ToIngest] = []
        done: list[tuple[FileRow, str | None]] = []  # rows now indexed; the gone path they were
        now = time.time()
        for rel, (cid, st) in hashed.items():
            old = known.get(rel)
            row = FileRow(rel, st, cid, INDEXED, None, now)
            seen.read[cid] = rel
            if old is not None and old.doc_cid == cid and rel not in seen.lost:
                done.append((row, None))
            elif cid in seen.gone_by_cid:
                done.append((row, seen.gone_by_cid.pop(cid)))
            elif cid in seen.indexed or cid in seen.present.values():
                done.append((row, None))
            else:
                prev = old.doc_cid if old is not None else None
                others = {c for r, c in seen.present.items() if r != rel}
                replaces = prev if prev and prev != cid and prev not in others else None
                ingests.append(ToIngest(rel, self.root / rel, cid, st, replaces))
                seen.indexed.add(cid)
        return ingests, done

    async def _renames(self, done: list[tuple[FileRow, str | None]], gone: dict[str, FileRow]) -> bool:
        """Record the rows whose document is in place; a rename's document gets its new path.  A
        rename the host could not take now (busy, away) is not recorded: the next pass finds it
        again.  Whether one must be tried again."""
        retry = False
        recorded: list[tuple[FileRow, str | None]] = []
        for row, was in done:
            if was is not None and row.doc_cid is not None and not await self._point(row.doc_cid, row.rel):
                retry = True
                continue
            if was is not None:
                gone.pop(was, None)
                log.info("folder_file_renamed", folder=self.key, doc_cid=row.doc_cid)
            recorded.append((row, was))
        if recorded:
            dropped = [w for _r, w in recorded if w]
            await run_blocking(self._state.drop, self.key, dropped, limiter=self._threads)
            await run_blocking(self._state.put, self.key, [r for r, _w in recorded], limiter=self._threads)
        return retry

    async def _point(self, doc_cid: str, rel: str) -> bool:
        """Tell ``doc_cid``'s document it is the file ``rel`` now; False if the host could not take
        it now (busy, away: the caller keeps what it knows and tries again).  Any other refusal is
        logged: the document stays found under the path it had."""
        outcome = await self._writer.set_source(doc_cid, self.root / rel)
        if not outcome.ok and not outcome.transient:
            log.info("folder_source_not_updated", folder=self.key, code=outcome.error)
        return not outcome.transient

    async def _ingest(self, items: list[ToIngest], known: dict[str, FileRow]) -> bool:
        """Ingest ``items`` batch by batch; whether one must be tried again later."""
        retry = False
        small = [i for i in items if i.stat.size <= self._settings.batch_file_bytes]
        step = self._settings.batch
        parts = [small[a : a + step] for a in range(0, len(small), step)]
        for part in [*parts, *([i] for i in items if i.stat.size > self._settings.batch_file_bytes)]:
            outcomes = await self._writer.ingest(part)
            rows = [
                self._row_after(item, o, known.get(item.rel)) for item, o in zip(part, outcomes, strict=True)
            ]
            retry = retry or any(o.transient for o in outcomes)
            await run_blocking(self._state.put, self.key, rows, limiter=self._threads)
        return retry

    def _row_after(self, item: ToIngest, outcome: Outcome, old: FileRow | None) -> FileRow:
        now = time.time()
        got = item.stat  # as it was read: a change since is the next pass's
        if outcome.ok:
            return FileRow(item.rel, got, item.doc_cid, INDEXED, None, now)
        if outcome.transient:
            self._events.pop(item.rel, None)
            keep = old.doc_cid if old is not None else None
            return FileRow(item.rel, got, keep, PENDING, outcome.message, now)
        # the previous version (if any) stays in the corpus until the file is readable again
        return FileRow(item.rel, got, old.doc_cid if old is not None else None, FAILED, outcome.message, now)

    async def _deletes(self, gone: dict[str, FileRow], still: dict[str | None, str]) -> bool:
        """Each gone file's document deleted, unless another file still has its content: then it
        names that file (it may have named the gone one; unchanged if it named that one already)."""
        retry = False
        dropped = []
        for rel, row in gone.items():
            if row.doc_cid is not None and row.doc_cid in still:
                if not await self._point(row.doc_cid, still[row.doc_cid]):  # kept: tried again
                    retry = True
                    continue
            elif row.doc_cid is not None:
                outcome = await self._writer.delete(row.doc_cid)
                if not outcome.ok:
                    retry = True
                    continue
            dropped.append(rel)
        if dropped:
            await run_blocking(self._state.drop, self.key, dropped, limiter=self._threads)
            self._dropped_at = time.time()
        return retry

    # what watch list shows ---------------------------------------------------------------------
    def summary(self, rows: dict[str, FileRow]) -> dict[str, Any]:
        counts = {INDEXED: 0, PENDING: 0, FAILED: 0}
        for row in rows.values():
            counts[row.status] = counts.get(row.status, 0) + 1
        failed = sorted((r for r in rows.values() if r.status == FAILED), key=lambda r: r.rel)
        out: dict[str, Any] = {
            "path": self.key,
            "corpus": self.corpus,
            "state": self.label,
            "files": len(rows),
            "indexed": counts[INDEXED],
            "pending": counts[PENDING],
            "failed": [
                {"path": str(self.root / r.rel), "reason": r.reason or ""} for r in failed[:MAX_FAILED_SHOWN]
            ],
            "failed_count": counts[FAILED],
            "last_change": max(
                (t for t in (*(r.changed_at for r in rows.values()), self._dropped_at) if t is not None),
                default=None,
            ),
            "passes": self.passes,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.scan is not None:
            out["scan"] = {"current": self.scan[0], "total": self.scan[1]}
        return out
