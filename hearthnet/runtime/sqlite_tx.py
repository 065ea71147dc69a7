"""One SQLite write transaction, for stores whose connection runs in autocommit mode."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from hearthnet.runtime.disk_full import disk_full, is_disk_full

__all__ = ["transaction"]


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the body raises (the caller serialises
    writers).  A full disk comes out as :class:`~hearthnet.errors.DiskFull`: SQLite may have
    rolled the transaction back itself then, so a rollback is only asked of an open one."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        where = _file_of(db)
        if not is_disk_full(exc, where):
            raise
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise disk_full(where, "a database") from exc


def _file_of(db: sqlite3.Connection) -> Path | None:
    """The main database's file (``None`` in memory or if SQLite cannot say)."""
    try:
        rows = db.execute("PRAGMA database_list").fetchall()
    except sqlite3.Error:
        return None
    name = next((r[2] for r in rows if r[1] == "main"), "")
    return Path(name) if name else None
