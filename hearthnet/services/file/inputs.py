"""The inputs of the file capabilities, checked before any work: ``bad_request`` with the reason."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Final

from hearthnet.blobs import Manifest, is_cid
from hearthnet.errors import BadRequest

__all__ = [
    "MAX_IMPORT_PATHS",
    "SOURCE_ERRORS",
    "absolute_path",
    "check_length",
    "cid_input",
    "import_input",
    "import_many_input",
    "imported",
]

MAX_IMPORT_PATHS: Final = 256
"""Most files one ``file.import {paths}`` call takes."""

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


def import_many_input(inp: dict[str, Any]) -> tuple[list[str], bool, bool]:
    """``paths`` (absolute, at most ``MAX_IMPORT_PATHS``), ``pin``, ``private`` of ``file.import {paths}``."""
    paths = inp.get("paths")
    if "path" in inp:
        raise BadRequest("give input.path or input.paths, not both")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise BadRequest("input.paths must be a non-empty list of absolute paths")
    if len(paths) > MAX_IMPORT_PATHS:
        raise BadRequest(f"input.paths has {len(paths)} paths; at most {MAX_IMPORT_PATHS} a call")
    for p in paths:
        absolute_path(p)
    _, pin, private = import_input({**inp, "path": ""})
    return list(paths), pin, private


def imported(manifest: Manifest) -> dict[str, Any]:
    return {"doc_cid": manifest.doc_cid, "size": manifest.size, "chunks": len(manifest.chunks)}


def check_length(manifest: Manifest, chunk_id: str, data: bytes) -> None:
    """``BadRequest`` unless ``data`` has the length ``manifest`` gives the chunk ``chunk_id``."""
    expected = manifest.length_of(chunk_id)
    if len(data) != expected:
        raise BadRequest(f"chunk {chunk_id} is {len(data)} bytes; the manifest makes it {expected}")
