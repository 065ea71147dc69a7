"""structlog set-up: JSON lines on stderr and in a size-rotated file, configured once at start-up.

Log ids, counts, timings and error codes; never document text, chunk text,
questions, retrieved content or vectors.  The file is written by a thread of
its own (``QueueHandler`` -> ``QueueListener`` -> ``RotatingFileHandler``), so
a log call on the event loop only queues its line.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import logging.handlers
import os
import queue
import resource
import sys
import threading
from datetime import UTC, datetime
from io import TextIOWrapper
from pathlib import Path
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

FILE_QUEUE_RECORDS = 10_000
"""Records waiting for the file writer beyond this are dropped (and counted in the file), never waited for."""


def configure_logging(
    level: str = "info",
    *,
    node: str | None = None,
    log_file: Path | None = None,
    max_bytes: int = 10 * 1024 * 1024,
    backups: int = 5,
) -> None:
    """Send structlog's JSON lines to stderr and, with ``log_file``, to that file too, rotated at
    ``max_bytes`` with ``backups`` older files kept; the standard library's loggers go through it."""
    shutdown_logging()
    global _log_file
    if log_file is not None:
        _log_file = _LogFile(log_file, max_bytes=max_bytes, backups=backups)
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(),
    ]

    def logger_factory(*_args: Any) -> structlog.PrintLogger:
        sink = _log_file  # looked up at each use: after shutdown_logging, stderr only
        return structlog.PrintLogger(sys.stderr) if sink is None else _TeeLogger(sys.stderr, sink)

    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=logger_factory,
        cache_logger_on_first_use=False,
    )
    if node is not None:
        structlog.contextvars.bind_contextvars(node=node[:20])
    # Route the standard library's logging (pypdf, chromadb, httpx) into structlog.
    root = logging.getLogger()
    root.handlers[:] = [_StructlogHandler()]
    root.setLevel(max(numeric, logging.WARNING))


def shutdown_logging() -> None:
    """Write what is still queued for the log file and close it (also run at exit)."""
    global _log_file
    log_file, _log_file = _log_file, None
    if log_file is not None:
        log_file.close()


class _TeeLogger(structlog.PrintLogger):
    """Prints each rendered record on stderr and queues it for the log file."""

    def __init__(self, file: TextIO, sink: _LogFile) -> None:
        super().__init__(file)
        self._sink = sink

    def msg(self, message: str) -> None:
        super().msg(message)
        self._sink.write(message)

    log = debug = info = warn = warning = err = error = critical = exception = fatal = failure = msg


class _LogFile:
    """Rendered records to a size-rotated file from a writer thread: callers only queue a line."""

    def __init__(self, path: Path, *, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.writer = _PrivateRotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", errors="backslashreplace"
        )
        self.queue: queue.Queue[logging.LogRecord | None] = queue.Queue(FILE_QUEUE_RECORDS)
        self.enqueuer = _DroppingQueueHandler(self.queue)
        self.listener = _Listener(self.queue, self.writer)
        self.listener.start()

    def write(self, line: str) -> None:
        self.enqueuer.handle(
            logging.makeLogRecord({"msg": line, "levelno": logging.INFO, "levelname": "INFO"})
        )

    def close(self) -> None:
        self.enqueuer.report_dropped()
        self.listener.stop()  # drains the queue first
        with contextlib.suppress(OSError):  # a full disk: reported by the failed writes already
            self.writer.close()


class _Listener(logging.handlers.QueueListener):
    def __init__(self, q: queue.Queue[logging.LogRecord | None], handler: logging.Handler) -> None:
        super().__init__(q, handler)
        self._records = q

    def enqueue_sentinel(self) -> None:
        self._records.put(None)  # QueueListener's sentinel; at close, waits for room instead of failing


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Never blocks its caller: a record that finds the queue full is dropped and counted, and the
    count goes to the file as a ``log_records_dropped`` record once there is room again (at the
    latest when the file is closed)."""

    def __init__(self, q: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(q)
        self._records = q
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # already the rendered line

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                self._records.put_nowait(_dropped_record(self.dropped))
                self.dropped = 0
            self._records.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def report_dropped(self) -> None:
        """Queue the count of records still unreported, waiting for room (at close)."""
        with self.lock or contextlib.nullcontext():
            count, self.dropped = self.dropped, 0
        if count:  # the lock is not held while waiting: the writer thread may log meanwhile
            self._records.put(_dropped_record(count))


def _dropped_record(count: int) -> logging.LogRecord:
    line = {
        "count": count,
        "event": "log_records_dropped",
        "level": "warning",
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    return logging.makeLogRecord({"msg": json.dumps(line), "levelno": logging.WARNING})


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating file readable by its owner only, whose write failures (a full disk) are one
    line on stderr per run of failures instead of a traceback per record."""

    _failing = False
    _failed = False

    def _open(self) -> TextIOWrapper:
        # always appending: RotatingFileHandler with a size limit opens with mode "a"
        return open(
            self.baseFilename, "a", encoding=self.encoding, errors=self.errors, opener=_private_opener
        )

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        super().emit(record)
        if not self._failed:
            self._failing = False

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed = True
        if self._failing:
            return
        self._failing = True
        exc = sys.exc_info()[1]
        # on stderr like every record (and queued for the file, written once it works again)
        structlog.get_logger("hearthnet.log").error(
            "log_file_write_failed", error=type(exc).__name__, message=str(exc)[:200]
        )


_log_file: _LogFile | None = None
atexit.register(shutdown_logging)


class _StructlogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        logger = structlog.get_logger(record.name)
        # Only the template, never the interpolated arguments: they may carry document text.
        event = {"logger": record.name, "template": str(record.msg)[:200]}
        if record.levelno >= logging.ERROR:
            logger.error("library_log", **event)
        elif record.levelno >= logging.WARNING:
            logger.warning("library_log", **event)
        else:
            logger.info("library_log", **event)


def process_figures() -> dict[str, Any]:
    """This process's resident memory (now and peak, MB) and OS threads, for ``node.stats``."""
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                fields[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):  # not Linux
        pass
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "rss_mb": round(fields["VmRSS"] / 1024, 1) if "VmRSS" in fields else None,
        "peak_rss_mb": round(peak_kib / 1024, 1),
        "threads": fields.get("Threads", threading.active_count()),
    }
