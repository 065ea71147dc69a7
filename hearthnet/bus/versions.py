"""Capability names and versions: ``name@X.Y`` refs, and the rule that ``name@A.B`` is satisfied by
``X.Y`` iff ``X == A and Y >= B`` (pure functions)."""

from __future__ import annotations

import functools
import re

from hearthnet.errors import BadRequest

__all__ = [
    "MAX_TIMEOUT_SECONDS",
    "NAME_RE",
    "Version",
    "parse_capability_ref",
    "parse_version",
    "version_satisfies",
    "version_text",
]

Version = tuple[int, int]
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def parse_capability_ref(ref: str) -> tuple[str, Version]:
    """``"rag.query@1.0"`` -> ``("rag.query", (1, 0))``; no version means ``1.0``."""
    name, _, ver = ref.partition("@")
    if not NAME_RE.match(name):
        raise BadRequest(f"not a capability name: {name!r:.80}")
    return name, parse_version(ver) if ver else (1, 0)


_VERSION_PART = re.compile(r"[0-9]{1,6}")
MAX_TIMEOUT_SECONDS = 24 * 3600.0
"""The longest ``timeout_seconds`` a capability may declare (a day)."""


@functools.lru_cache(maxsize=256)
def parse_version(text: str) -> Version:
    """``"X.Y"`` -> ``(X, Y)`` in ASCII digits (cached: every request has one; a bad one raises each time)."""
    major, dot, minor = text.partition(".")
    if not (dot and _VERSION_PART.fullmatch(major) and _VERSION_PART.fullmatch(minor)):
        raise BadRequest(f"a version looks like X.Y, got {text!r:.20}")
    return int(major), int(minor)


def version_satisfies(offered: Version, wanted: Version) -> bool:
    """``name@A.B`` is satisfied by ``X.Y`` iff ``X == A`` and ``Y >= B``."""
    return offered[0] == wanted[0] and offered[1] >= wanted[1]


def version_text(v: Version) -> str:
    """``(X, Y)`` -> ``"X.Y"`` (remembered: every call sends one)."""
    text = _VERSION_TEXTS.get(v)
    if text is None:
        text = f"{v[0]}.{v[1]}"
        if len(_VERSION_TEXTS) >= 256:  # versions come from peers too: start afresh
            _VERSION_TEXTS.clear()
        _VERSION_TEXTS[v] = text
    return text


_VERSION_TEXTS: dict[Version, str] = {}
