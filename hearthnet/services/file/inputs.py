"""The inputs of the file capabilities, checked before any work: ``bad_request`` with the reason."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Final

from hearthnet.blobs import Manifest, is_cid
from hearthnet.errors import BadRequest

__all__ = ["SOURCE_ERRORS", "absolute_path", "check_length", "cid_input", "import_input", "imported"]

SOURCE_ERRORS: Final = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG}
)
"""Errors of opening the file to import: the caller's path, not this node's disk."""


def absolute_path(path: str) -> Path:
    """``path`` as given, if absolute: the node's working directory is not the caller's."""
    if "\x00" in path:
        raise BadRequest("input.path contains a NUL character")
    p = Path(path)
    if not p.is_absolute():
        raise BadRequest(f"input.path must be an absolute path, got {path!r:.200}")
    return p


def cid_input(inp: dict[str, Any], key: str) -> str:
    value = inp.get(key)
    if not isinstance(value, str) or not is_cid(value):
        raise BadRequest(f"input.{key} must be a blake3:<hex> CID")
    return value


def import_input(inp: dict[str, Any]) -> tuple[str, bool, bool]:
    """``path``, ``pin`` (default true) and ``private`` (default false) of an import's input."""
    path = inp.get("path")
    if not isinstance(path, str):
        raise BadRequest("input.path is required")
    pin, private = inp.get("pin", True), inp.get("private", False)
    if not isinstance(pin, bool) or not isinstance(private, bool):
        raise BadRequest("input.pin and input.private must be true or false")
    return path, pin, private


def imported(manifest: Manifest) -> dict[str, Any]:
    return {"doc_cid": manifest.doc_cid, "size": manifest.size, "chunks": len(manifest.chunks)}


def check_length(manifest: Manifest, chunk_id: str, data: bytes) -> None:
    """``BadRequest`` unless ``data`` has the length ``manifest`` gives the chunk ``chunk_id``."""
    expected = manifest.length_of(chunk_id)
    if len(data) != expected:
        raise BadRequest(f"chunk {chunk_id} is {len(data)} bytes; the manifest makes it {expected}")
