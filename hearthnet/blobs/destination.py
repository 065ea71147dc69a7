"""Writing a blob to a path the user chose: whole or not at all, and never over what it must not touch.

Blocking code.  The destination's final name is never followed (a symbolic link
there is refused, not written through), nothing but a regular file is ever
replaced (a FIFO, a device, a socket or a directory is refused), and an existing
regular file is replaced only when the caller forces it.  The bytes go to a new
temporary file in the destination's directory, are fsynced, then published with
``link(2)`` (which fails if the name exists) or, when forced, ``rename(2)`` over
the regular file checked beforehand.  What this guarantees against a concurrent
change of the destination is in ``specs/blobs.md``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from hearthnet.errors import BadRequest, DiskFull

TEMP_NAME_KEEP: Final = 100
"""Bytes of the destination's name kept in its temporary file's name (names are <= 255 bytes)."""

_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_DEST_MISSING: Final = frozenset({errno.ENOENT, errno.ENOTDIR})
_DEST_REFUSED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_NO_HARD_LINKS: Final = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
"""``link(2)`` errors of a file system that has no hard links (FAT, some FUSE and network mounts)."""

_KINDS: Final = (
    (stat.S_ISLNK, "a symbolic link (not followed: give the path of the file itself)"),
    (stat.S_ISDIR, "a directory; give a file path"),
    (stat.S_ISFIFO, "a FIFO (named pipe), not a regular file"),
    (stat.S_ISCHR, "a character device, not a regular file"),
    (stat.S_ISBLK, "a block device, not a regular file"),
    (stat.S_ISSOCK, "a socket, not a regular file"),
)


def destination_path(text: str) -> Path:
    """The path ``text`` names, refusing one that ends in a separator (it names a directory)."""
    if text.endswith(os.sep):
        raise BadRequest(f"cannot export to {text}: it names a directory; give a file path")
    return Path(text)


def _refusal(dest: Path, existing: os.stat_result | None, *, force: bool) -> str | None:
    """Why ``dest`` (``existing`` is its ``lstat``, ``None`` if absent) must not be written, or ``None``."""
    if existing is None:
        return None
    mode = existing.st_mode
    for test, words in _KINDS:
        if test(mode):
            return f"cannot export to {dest}: it is {words}"
    if not stat.S_ISREG(mode):
        return f"cannot export to {dest}: it is not a regular file"
    if not force:
        return f"cannot export to {dest}: it already exists; give --force (input.force) to replace it"
    return None


def check_destination(dest: Path, *, force: bool) -> None:
    """:class:`BadRequest` if ``dest`` could not be written as :func:`write_destination` would.

    A courtesy check before a long transfer; the write checks again.
    """
    with export_errors(dest, 0):
        name = _final_name(dest)
        dir_fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # a missing one: ENOENT
        try:
            reason = _refusal(dest, _lstat_at(dir_fd, name), force=force)
        finally:
            os.close(dir_fd)
    if reason is not None:
        raise BadRequest(reason)


def write_destination(dest: Path, parts: Iterable[bytes], *, force: bool) -> None:
    """Write ``parts`` to ``dest``: a new file, or (``force``) in place of a regular file.

    Every step works on the destination's directory opened once, so a directory
    swapped meanwhile changes nothing.  A replaced file's permission bits are kept
    (as ``cp`` keeps them); a new file gets 0666 less the umask.  On any failure
    the temporary file is removed and ``dest`` is as it was.
    """
    name = _final_name(dest)
    dir_fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        before = _lstat_at(dir_fd, name)
        reason = _refusal(dest, before, force=force)
        if reason is not None:
            raise BadRequest(reason)
        fd, tmp = _create_temp(dir_fd, name)
        try:
            with os.fdopen(fd, "wb") as f:
                if before is not None:
                    os.fchmod(f.fileno(), stat.S_IMODE(before.st_mode) & 0o777)
                for part in parts:
                    f.write(part)
                f.flush()
                os.fsync(f.fileno())
            _publish(dir_fd, tmp, name, dest, before)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _final_name(dest: Path) -> str:
    name = dest.name
    if name in ("", ".", ".."):
        raise BadRequest(f"cannot export to {dest}: it is a directory; give a file path")
    return name


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _create_temp(dir_fd: int, name: str) -> tuple[int, bytes]:
    """A new, empty ``.<name>.<hex>.part`` in the directory (0666 less the umask, like any new file)."""
    stem = os.fsencode(name)[:TEMP_NAME_KEEP]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = b"." + stem + b"." + secrets.token_hex(6).encode() + b".part"
        try:
            return os.open(tmp, flags, 0o666, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue


def _publish(dir_fd: int, tmp: bytes, name: str, dest: Path, before: os.stat_result | None) -> None:
    """Give the written temporary file the name ``name``, touching nothing else that is there."""
    if before is None:
        try:  # link(2) never replaces: whatever appeared at the name meanwhile is left alone
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            raise BadRequest(f"cannot export to {dest}: it appeared while the blob was written") from None
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            if _lstat_at(dir_fd, name) is not None:
                raise BadRequest(f"cannot export to {dest}: it appeared while the blob was written") from None
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        os.unlink(tmp, dir_fd=dir_fd)
        return
    now = _lstat_at(dir_fd, name)
    if (
        now is None
        or not stat.S_ISREG(now.st_mode)
        or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino)
    ):
        raise BadRequest(f"cannot export to {dest}: it changed while the blob was written; it was left alone")
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


@contextlib.contextmanager
def export_errors(dest: Path, size: int) -> Iterator[None]:
    """Errors of writing ``dest`` as the caller's mistake (``bad_request``) or a full disk."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            try:
                free = shutil.disk_usage(dest.parent).free
            except OSError:
                free = 0
            raise DiskFull(
                f"disk full: no room to export {size} bytes to {dest} ({free} bytes free there)"
            ) from exc
        if exc.errno in _DEST_MISSING:
            raise BadRequest(f"cannot export to {dest}: directory {dest.parent} does not exist") from exc
        if exc.errno == errno.EISDIR:
            raise BadRequest(f"cannot export to {dest}: it is a directory; give a file path") from exc
        if exc.errno in _DEST_REFUSED:
            raise BadRequest(f"cannot export to {dest}: {exc.strerror}") from exc
        if exc.errno != errno.EIO:  # a name too long, a symlink loop, a busy mount point, ...
            raise BadRequest(f"cannot export to {dest}: {exc.strerror or exc}") from exc
        raise  # the disk failing is not the caller's mistake
    except ValueError as exc:  # a NUL byte in the path
        raise BadRequest(f"cannot export to {dest!r}: {exc}") from exc
