"""structlog set-up: JSON lines on stderr, configured once at start-up.

Log ids, counts, timings and error codes; never document text, chunk text,
retrieved content or vectors.
"""

from __future__ import annotations

import logging
import resource
import sys
import threading
from pathlib import Path
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", *, node: str | None = None) -> None:
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(),
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    if node is not None:
        structlog.contextvars.bind_contextvars(node=node[:20])
    # Route the standard library's logging (pypdf, chromadb, httpx) into structlog.
    root = logging.getLogger()
    root.handlers[:] = [_StructlogHandler()]
    root.setLevel(max(numeric, logging.WARNING))


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
