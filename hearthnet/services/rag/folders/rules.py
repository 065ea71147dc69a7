"""Which files of a watched folder are documents (pure: names only, no I/O but reading the
folder's ``.hearthnetignore``).

A file is watched when its suffix is a format of the registry (:func:`~hearthnet.contracts.formats.by_suffix`,
so a new format is watched without change here) and it is not ignored: hidden (any part of its
path starts with a dot), an editor's or a browser's temporary or lock file (``~$x.docx``,
``.~lock.x#``, ``x.part``, ``x.crdownload``, ``x~``, ``x.swp``, ``x.tmp``), or matched by a
pattern of the folder's ``.hearthnetignore`` (one glob a line, ``#`` comments; a pattern with a
``/`` matches the path from the folder, one without matches any part's name, a trailing ``/``
matches folders only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from hearthnet.contracts.formats import by_suffix

__all__ = ["IGNORE_FILE", "TEMPORARY", "Ignore", "parse_ignore", "read_ignore"]

IGNORE_FILE = ".hearthnetignore"
TEMPORARY: tuple[str, ...] = ("~$*", ".~lock*", "*.part", "*.crdownload", "*~", "*.swp", "*.tmp", ".#*")
"""Names of files an editor, an office suite or a browser is still writing or holds locked."""
MAX_PATTERNS = 1000
MAX_IGNORE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Ignore:
    """A folder's ignore rules: the built-in ones and its ``.hearthnetignore`` patterns."""

    patterns: tuple[str, ...] = ()

    def ignored(self, rel: PurePosixPath) -> bool:
        """Whether the file ``rel`` (relative to the folder) is left out."""
        parts = rel.parts
        if any(p.startswith(".") for p in parts):
            return True
        if any(fnmatchcase(rel.name, t) for t in TEMPORARY):
            return True
        return any(_matches(rel, p) for p in self.patterns)

    def watched(self, rel: PurePosixPath) -> bool:
        """Whether ``rel`` is a document of the folder: a known format, not ignored."""
        return by_suffix(rel.name) is not None and not self.ignored(rel)


def _matches(rel: PurePosixPath, pattern: str) -> bool:
    dirs_only = pattern.endswith("/")
    pat = pattern.rstrip("/")
    if not pat:
        return False
    names = rel.parts[:-1] if dirs_only else rel.parts
    if "/" in pat:
        pat = pat.lstrip("/")
        prefixes = ["/".join(rel.parts[: i + 1]) for i in range(len(names))]
        return any(fnmatchcase(p, pat) for p in prefixes)
    return any(fnmatchcase(n, pat) for n in names)


def parse_ignore(lines: Iterable[str]) -> Ignore:
    """The patterns of a ``.hearthnetignore``'s lines (blank lines and ``#`` comments skipped)."""
    out = []
    for line in lines:
        text = line.strip()
        if text and not text.startswith("#"):
            out.append(text)
        if len(out) >= MAX_PATTERNS:
            break
    return Ignore(tuple(out))


def read_ignore(root: Path) -> Ignore:
    """The rules of the folder ``root`` (blocking: reads its ``.hearthnetignore`` if there is one)."""
    try:
        with (root / IGNORE_FILE).open("rb") as f:
            data = f.read(MAX_IGNORE_BYTES)
    except OSError:
        return Ignore()
    return parse_ignore(data.decode("utf-8", errors="replace").splitlines())
