"""The node's log file (``hearthnet/runtime/observability.py``): JSON lines rotated by size, private,
written by a thread of its own so a log call never waits on the disk."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from hearthnet.runtime import observability
from hearthnet.runtime.observability import FILE_QUEUE_RECORDS, configure_logging, shutdown_logging
from hearthnet.testing import wait_for


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """configure_logging is process-wide: put structlog and the root logger back afterwards."""
    old_config = structlog.get_config()
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    try:
        yield
    finally:
        shutdown_logging()
        structlog.configure(**old_config)
        root.handlers[:] = old_handlers
        root.setLevel(old_level)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_file_rotates_by_size_keeps_its_backups_and_loses_nothing_it_keeps(tmp_path: Path) -> None:
    path = tmp_path / "home" / "logs" / "node.log"
    configure_logging("info", log_file=path, max_bytes=4096, backups=2)
    log = structlog.get_logger("test")
    for i in range(300):
        log.info("tick", i=i, peer="ed25519:" + "x" * 43)
    shutdown_logging()  # drains the queue
    files = [path.with_name("node.log.2"), path.with_name("node.log.1"), path]
    assert sorted(p.name for p in path.parent.iterdir()) == ["node.log", "node.log.1", "node.log.2"]
    kept = [r["i"] for p in files for r in records(p)]
    assert kept == list(range(300 - len(kept), 300))  # the newest records, in order, none missing
    assert len(kept) > 2 * 4096 // 200  # two full files at least
    for p in files:
        assert p.stat().st_size <= 4096
        assert stat.S_IMODE(p.stat().st_mode) == 0o600  # the log names peers and corpora
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert records(path)[-1]["level"] == "info" and "timestamp" in records(path)[-1]


def test_a_log_call_does_not_wait_for_the_disk(tmp_path: Path) -> None:
    """While the file is stuck (its writer holds the handler's lock, as during a slow write), log
    calls return at once; everything they logged is written once the disk moves again."""
    path = tmp_path / "logs" / "node.log"
    configure_logging("info", log_file=path)
    assert observability._log_file is not None
    writer = observability._log_file.writer
    done = threading.Event()

    def log_some() -> None:
        log = structlog.get_logger("test")
        for i in range(200):
            log.info("while_stuck", i=i)
        done.set()

    writer.acquire()  # the disk "hangs"
    try:
        threading.Thread(target=log_some, daemon=True).start()
        assert done.wait(timeout=10), "a log call waited for the file"
    finally:
        writer.release()
    shutdown_logging()
    assert [r["i"] for r in records(path)] == list(range(200))


def test_records_beyond_the_queue_are_dropped_and_counted_never_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "node.log"
    configure_logging("info", log_file=path)
    log_file = observability._log_file
    assert log_file is not None
    log = structlog.get_logger("test")

    def flood(event: str) -> None:
        log_file.writer.acquire()  # the disk is stuck: the queue fills up
        try:
            for i in range(FILE_QUEUE_RECORDS + 50):
                log.info(event, i=i)
        finally:
            log_file.writer.release()

    flood("flood")
    wait_for(log_file.queue.empty, timeout=30, what="the writer to catch up")
    log.info("after")  # the count goes first, once there is room
    flood("flood_at_close")
    shutdown_logging()  # the count still owed is written at close
    written = records(path)
    for event, follows in (("flood", "after"), ("flood_at_close", None)):
        kept = [i for i, r in enumerate(written) if r["event"] == event]
        marker = kept[-1] + 1
        assert written[marker]["event"] == "log_records_dropped" and written[marker]["level"] == "warning"
        count = written[marker]["count"]
        assert isinstance(count, int) and count > 0
        assert len(kept) + count == FILE_QUEUE_RECORDS + 50  # every record written or counted
        assert [written[i]["i"] for i in kept] == sorted(written[i]["i"] for i in kept)
        if follows:
            assert written[marker + 1]["event"] == follows


def test_a_file_that_cannot_be_written_is_one_line_on_stderr_not_a_traceback_per_record(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "logs" / "node.log"
    path.parent.mkdir()
    os.symlink("/dev/full", path)  # every write fails with ENOSPC, as on a full disk
    configure_logging("info", log_file=path)
    log = structlog.get_logger("test")
    for i in range(5):
        log.info("on_a_full_disk", i=i)
    shutdown_logging()
    err = capfd.readouterr().err
    assert err.count("on_a_full_disk") == 5  # stderr still has every record
    failures = [line for line in err.splitlines() if "log_file_write_failed" in line]
    assert len(failures) == 1 and "Traceback" not in err
    assert json.loads(failures[0])["error"] == "OSError"
