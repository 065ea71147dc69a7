"""A folder's files as its disk holds them, and what changed since the watcher's state (the walk
and the hash are blocking: worker threads; :func:`plan` is pure)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hearthnet.blobs.cid import CidHasher
from hearthnet.services.rag.folders.rules import Ignore
from hearthnet.services.rag.folders.state import FAILED, INDEXED, FileRow, Stat

__all__ = ["MAX_FILES", "Plan", "hash_file", "plan", "stat_of", "walk"]

MAX_FILES = 200_000
"""Files one folder may hold: a walk stops there (a whole disk watched by mistake)."""
_READ = 1 << 20


def stat_of(path: Path) -> Stat | None:
    """A regular file's size and mtime (``None``: gone, or not a regular file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not os.path.isfile(path):
        return None
    return Stat(st.st_size, st.st_mtime_ns)


def walk(root: Path, ignore: Ignore) -> dict[str, Stat]:
    """Every watched file under ``root`` (relative POSIX path -> its stat); folders linked to are
    not followed (a link back up would never end), unreadable ones are skipped."""
    out: dict[str, Stat] = {}
    todo = [root]
    while todo and len(out) < MAX_FILES:
        here = todo.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            rel = PurePosixPath(Path(entry.path).relative_to(root).as_posix())
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                elif entry.is_file() and ignore.watched(rel):
                    st = entry.stat()
                    out[str(rel)] = Stat(st.st_size, st.st_mtime_ns)
            except OSError:
                continue
    return out


def hash_file(path: Path) -> tuple[str, Stat] | None:
    """The file's ``doc_cid`` (BLAKE3 of its bytes) and its stat, if it held still while it was
    read (``None``: gone, or written to meanwhile: not stable yet)."""
    before = stat_of(path)
    if before is None:
        return None
    hasher = CidHasher()
    try:
        with path.open("rb") as f:
            while chunk := f.read(_READ):
                hasher.update(chunk)
    except OSError:
        return None
    after = stat_of(path)
    if after != before or hasher.length != before.size:
        return None
    return hasher.cid(), before


@dataclass
class Plan:
    """What a pass has to do: files to read (new, changed, or still pending), files gone, and
    files whose recorded state still holds (never read again)."""

    todo: dict[str, Stat] = field(default_factory=dict)
    gone: dict[str, FileRow] = field(default_factory=dict)
    unchanged: dict[str, FileRow] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    """Files to do because the corpus no longer holds their document (ingested again as they are)."""


def plan(disk: Mapping[str, Stat], known: Mapping[str, FileRow]) -> Plan:
    """Compare the disk with the state: a file whose size and mtime are those recorded, indexed
    or failed, is unchanged; every other file on disk is to do; every recorded one not on disk
    is gone."""
    out = Plan()
    for rel, st in disk.items():
        row = known.get(rel)
        if row is not None and row.stat == st and row.status in (INDEXED, FAILED):
            out.unchanged[rel] = row
        else:
            out.todo[rel] = st
    for rel, row in known.items():
        if rel not in disk:
            out.gone[rel] = row
    return out
