"""ULIDs: 48-bit millisecond time + 80 random bits, 26 Crockford base32 chars.

The text form sorts like the 128-bit number, so ``event_id`` ties in Lamport
order break the same way on every node.
"""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["ULID_LEN", "is_ulid", "new_ulid"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_LEN = 26
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_TIME_MAX = (1 << 48) - 1


def new_ulid(*, now_ms: int | None = None) -> str:
    """A fresh ULID; ``now_ms`` (ms since the epoch) defaults to the wall clock."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if not 0 <= ms <= _TIME_MAX:
        raise ValueError("ULID time must fit in 48 bits")
    value = (ms << 80) | secrets.randbits(80)
    chars = []
    for _ in range(ULID_LEN):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def is_ulid(text: object) -> bool:
    """True for a canonical (upper-case) 26-character ULID."""
    return isinstance(text, str) and _ULID_RE.fullmatch(text) is not None
