"""Uploads from the browser: the file is stored, imported and ingested as a job of the UI server.

The request that carries the bytes ends once they are on disk; the job then runs in the UI
server's own task group (a page that navigates away does not cancel it) through the client's
one ingest flow (:func:`~hearthnet.frontends.client.ingest.ingest_files`, as ``hearthnet
ingest``), and reports each step to the pages of the same login through the :class:`LiveHub`:
``import``, then ``rag.ingest``'s own progress frames (``push`` first when another node hosts
the corpus; ``wait`` while the host is busy), then ``done`` or ``error`` with the bus error's
code and message.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.community.levels import Level
from hearthnet.errors import BusError, InternalError, error_from_wire
from hearthnet.frontends.client.ingest import Document, ingest_files
from hearthnet.frontends.http.live import LiveHub
from hearthnet.frontends.http.policy import GatedBus

__all__ = ["Job", "Jobs"]

log = structlog.get_logger("hearthnet.ui")

KEPT = 200
"""Finished jobs remembered (the Library page lists the recent ones of its login)."""
AT_ONCE = 2
"""Jobs running at once (``rag.ingest`` serves two at a time; the rest wait here, not as errors)."""
BUSY_RETRY_SECONDS = 600.0
"""How long a job keeps retrying an ingest refused with ``capacity_exceeded``."""


@dataclass
class Job:
    id: str
    token_id: str
    name: str
    corpus: str
    size: int
    state: str = "queued"
    """queued -> importing -> ingesting -> done | error"""
    stage: str = ""
    current: int = 0
    total: int = 0
    error: str | None = None
    message: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """Everything the UI shows of the job: all but whose it is (``token_id``)."""
        return {key: value for key, value in asdict(self).items() if key != "token_id"}


class Jobs:
    def __init__(self, bus: GatedBus, hub: LiveHub, upload_dir: Path) -> None:
        self._bus = bus
        self._hub = hub
        self.upload_dir = upload_dir
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._ids = itertools.count(1)
        self._limiter = anyio.CapacityLimiter(AT_ONCE)
        self._tg: anyio.abc.TaskGroup | None = None

    def attach(self, tg: anyio.abc.TaskGroup) -> None:
        """Jobs run in this task group (the UI server's): they outlive the upload request."""
        self._tg = tg

    def of(self, token_id: str) -> list[Job]:
        return [j for j in self._jobs.values() if j.token_id == token_id]

    def start(self, *, token_id: str, level: Level, name: str, corpus: str, path: Path, size: int) -> Job:
        assert self._tg is not None
        job = Job(id=f"job-{next(self._ids)}", token_id=token_id, name=name, corpus=corpus, size=size)
        self._jobs[job.id] = job
        while len(self._jobs) > KEPT:
            oldest = next(iter(self._jobs.values()))
            if oldest.state not in ("done", "error"):
                break
            self._jobs.popitem(last=False)
        self._tg.start_soon(self._run, job, level, path)
        return job

    def _update(self, job: Job, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(job, key, value)
        self._hub.publish("job", job.to_json(), token_id=job.token_id)

    async def _run(self, job: Job, level: Level, path: Path) -> None:
        try:
            async with self._limiter:
                await self._ingest(job, level, path)
        except BusError as exc:
            self._update(job, state="error", error=exc.code, message=exc.message)
        except Exception:
            log.exception("ui_job_failed", job=job.id)
            err = InternalError("the upload failed inside the node; see its log")
            self._update(job, state="error", error=err.code, message=err.message)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_remove, path)
        log.info("ui_job", job=job.id, state=job.state, error=job.error, corpus=job.corpus)

    async def _ingest(self, job: Job, level: Level, path: Path) -> None:
        def progress(label: str, frame: dict[str, Any]) -> None:
            stage = frame.get("stage")
            current, total = frame.get("current"), frame.get("total")
            if isinstance(stage, str) and isinstance(current, int) and isinstance(total, int):
                state = "importing" if stage == "import" else "ingesting"
                self._update(job, state=state, stage=stage, current=current, total=total)

        _, (entry,) = await ingest_files(
            self._bus.login(level),
            job.corpus,
            [Document(str(path), job.name)],
            progress=progress,
            busy_seconds=BUSY_RETRY_SECONDS,
        )
        if not entry["ok"]:
            raise error_from_wire({"error": entry["error"], "message": entry["message"]})
        self._update(
            job,
            state="done",
            stage="done",
            current=1,
            total=1,
            result={
                "doc_cid": entry["doc_cid"],
                "node": entry["node"],
                "chunks": entry["chunks_indexed"],
                "ocr_pages": entry.get("ocr_pages", []),
                "existing": entry["existing"],
            },
        )


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
