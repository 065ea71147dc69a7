"""File-level helpers of the blob store: atomic temp files, fsync/syncfs, bounded reads, errors.

Blocking code, no index.  A full disk becomes ``capacity_exceeded``
(:func:`disk_full_is_capacity`).  Writing to a user's path is in
:mod:`~hearthnet.blobs.destination`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

from hearthnet.blobs.cid import chunk_cid
from hearthnet.blobs.manifest import MAX_CHUNK_SIZE, Manifest, ManifestBuilder
from hearthnet.errors import BadRequest, DiskFull
from hearthnet.runtime.disk_full import is_disk_full

_MAX_PENDING_DIRS: Final = 1024
"""Directory fsyncs batched by one put before they are flushed (bounds memory)."""


@contextlib.contextmanager
def disk_full_is_capacity(root: Path, needed: int) -> Iterator[None]:
    """A write that fails because the disk (or a quota) is full is :class:`DiskFull`
    (``capacity_exceeded``, "disk full: ..."), not a crash."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        if not is_disk_full(exc, root):
            raise
        try:
            free = shutil.disk_usage(root).free
        except OSError:
            free = 0
        raise DiskFull(
            f"disk full: the blob store under {root} is out of space ({free} bytes free, about {needed} "
            "more needed): free some space, then send again (whole chunks already stored are kept "
            "and not sent again)"
        ) from exc


class DirSync:
    """Directories whose renames still await an fsync, during one local put.

    A chunk's *content* is fsynced before its rename either way; deferring the
    directory fsync only lets the rename's durability wait until :meth:`flush`,
    which the writer calls before it registers the blob.  A crash before that
    can lose a renamed chunk (it is then missing and written again), never
    leave a wrong one.
    """

    def __init__(self) -> None:
        self._dirs: set[Path] = set()

    def add(self, directory: Path) -> None:
        self._dirs.add(directory)
        if len(self._dirs) >= _MAX_PENDING_DIRS:
            self.flush()

    def flush(self) -> None:
        """fsync every directory added so far (blocking)."""
        dirs, self._dirs = self._dirs, set()
        for d in dirs:
            fsync_dir(d)


def write_temp(tmp_dir: Path, parts: tuple[bytes | memoryview, ...], *, fsync: bool) -> str:
    """Write ``parts`` to a new file in ``tmp_dir`` (fsynced if asked); its path, or nothing left behind."""
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix="w-")
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return tmp


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bounded(path: Path) -> bytes | None:
    """The file's bytes, or ``None`` if it is larger than any valid chunk."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_CHUNK_SIZE:
            return None
        data = f.read(size + 1)  # +1: a file that grew since fstat still fails its hash
    assert isinstance(data, bytes)
    return data if len(data) <= MAX_CHUNK_SIZE else None


def intact(path: Path, chunk_id: str) -> bool:
    """Whether ``path`` holds exactly the chunk ``chunk_id`` (hashed: a same-size bit flip is not intact)."""
    try:
        data = read_bounded(path)
    except FileNotFoundError:
        return False
    return data is not None and chunk_cid(data) == chunk_id


def read_exact(f: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes, short only at end of file."""
    data = f.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def manifest_of_stream(f: BinaryIO, chunk_size: int, size: int) -> Manifest:
    """The manifest of the next ``size`` bytes of ``f`` (one reading pass, nothing stored)."""
    builder = ManifestBuilder(chunk_size)
    left = size
    while left > 0 and (chunk := read_exact(f, min(chunk_size, left))):
        left -= len(chunk)
        builder.add(chunk)
    return builder.build()


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, else :class:`BadRequest`.

    Opened without blocking and checked on the descriptor itself: a path swapped for
    a FIFO after a check would otherwise block the reading thread forever.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadRequest(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _syncfs_function() -> Callable[[int], int] | None:
    """``syncfs(2)`` from the C library (Linux), or ``None`` where it does not exist."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


SYNCFS = _syncfs_function()


def sync_filesystem(path: Path) -> None:
    """Make every write to the filesystem holding ``path`` durable (one journal commit)."""
    assert SYNCFS is not None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed: {os.strerror(err)}")
    finally:
        os.close(fd)
