"""ULIDs: 48-bit millisecond time + 80 random bits, 26 Crockford base32 chars.

The text form sorts like the 128-bit number, so ``event_id`` ties in Lamport
order break the same way on every node.

An event's id is not random: its 80 low bits are derived from the author and
the author's sequence number (:func:`event_ulid`), so nobody but the author
can sign an event that carries an id of one of the author's events.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time

__all__ = ["ULID_LEN", "event_id_bound_to", "event_ulid", "is_ulid", "new_ulid"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_LEN = 26
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_TIME_MAX = (1 << 48) - 1
_TIME_CHARS = 10  # 50 bits hold the 48-bit time; the other 16 chars are the 80 low bits
_SEQ_MAX = (1 << 64) - 1


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_ulid(*, now_ms: int | None = None) -> str:
    """A fresh ULID; ``now_ms`` (ms since the epoch) defaults to the wall clock."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if not 0 <= ms <= _TIME_MAX:
        raise ValueError("ULID time must fit in 48 bits")
    return _encode((ms << 80) | secrets.randbits(80), ULID_LEN)


def _bound_bits(author: str, seq: int) -> str:
    """Crockford base32 of the first 80 bits of blake2b(utf8(author) || 0x00 || seq as u64 BE)."""
    if not 0 <= seq <= _SEQ_MAX:
        raise ValueError("seq must fit in 64 bits")
    digest = hashlib.blake2b(
        author.encode("utf-8") + b"\x00" + seq.to_bytes(8, "big"), digest_size=10, person=b"hearthnet-event"
    ).digest()
    return _encode(int.from_bytes(digest, "big"), ULID_LEN - _TIME_CHARS)


def event_ulid(author: str, seq: int, *, now_ms: int) -> str:
    """The id of ``author``'s event number ``seq``: time ``now_ms`` (clamped to 48 bits) + bound bits."""
    return _encode(max(0, min(now_ms, _TIME_MAX)), _TIME_CHARS) + _bound_bits(author, seq)


def event_id_bound_to(event_id: str, author: str, seq: int) -> bool:
    """True if ``event_id``'s 80 low bits are the ones derived from ``(author, seq)``."""
    return is_ulid(event_id) and event_id[_TIME_CHARS:] == _bound_bits(author, seq)


def is_ulid(text: object) -> bool:
    """True for a canonical (upper-case) 26-character ULID."""
    return isinstance(text, str) and _ULID_RE.fullmatch(text) is not None
