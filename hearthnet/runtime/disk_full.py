"""A full disk said as a full disk: the one place that recognises it.

``ENOSPC`` (and a full quota, a file too large) from the OS, SQLite's "database or disk is
full", and a SQLite I/O error on a filesystem with no space left are all the same thing for the
person who reads the error: :class:`~hearthnet.errors.DiskFull`, whose message starts with "disk
full" and says where and how much is free.  The storage boundaries (the blob store, every SQLite
transaction through :mod:`hearthnet.runtime.sqlite_tx`, the web UI's token store and uploads)
convert with :func:`disk_full_said`.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from hearthnet.errors import DiskFull

__all__ = ["disk_full", "disk_full_said", "is_disk_full"]

_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_SQLITE_FULL: Final = 13
_SQLITE_IOERR: Final = 10
_NEARLY_NOTHING: Final = 64 * 1024
"""Free bytes under which a SQLite I/O error is taken for a full disk (SQLite's journal and page
writes report ENOSPC as a plain I/O error in places)."""


def _free_bytes(where: Path | None) -> int | None:
    if where is None:
        return None
    for path in (where, *where.parents):
        try:
            return shutil.disk_usage(path).free
        except OSError:
            continue
    return None


def is_disk_full(exc: BaseException, where: Path | None = None) -> bool:
    """Whether ``exc`` means the disk holding ``where`` is full."""
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if not isinstance(code, int):
            return False  # raised by hand, not by SQLite: nothing to tell by
        if code & 0xFF == _SQLITE_FULL:
            return True
        if code & 0xFF == _SQLITE_IOERR:
            free = _free_bytes(where)
            return free is not None and free < _NEARLY_NOTHING
    return False


def disk_full(where: Path | None, what: str) -> DiskFull:
    """The error that says ``what`` could not be written because the disk under ``where`` is full."""
    free = _free_bytes(where)
    place = f" under {where}" if where is not None else ""
    left = f" ({free} bytes free)" if free is not None else ""
    return DiskFull(f"disk full: {what} could not be written{place}{left}: free some space, then try again")


@contextlib.contextmanager
def disk_full_said(where: Path | None, what: str) -> Iterator[None]:
    """Run the body; a full disk under ``where`` comes out as :class:`DiskFull` naming ``what``."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        if not is_disk_full(exc, where):
            raise
        raise disk_full(where, what) from exc
