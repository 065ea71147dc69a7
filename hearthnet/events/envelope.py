"""The signed event envelope.

An event travels as ``{"body": bytes, "sig": bytes}``.  ``body`` is a msgpack
map ``{schema_version, event_id, lamport, wall_clock, community_id, author,
seq, event_type, data}`` and ``sig`` is the author's Ed25519 signature over
exactly those bytes.  The body is kept verbatim: it is never re-serialised, so
what is stored and forwarded is what the author signed.

``event_id`` is bound to ``(author, seq)`` (:func:`event_ulid`): only the
author can sign a body carrying one of its event ids, so an id names one
author's one sequence number and nobody can squat on someone else's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.errors import BadRequest, BusError, InvalidSignature
from hearthnet.events.ulid import event_id_bound_to, event_ulid, is_ulid
from hearthnet.identity.keys import Identity, verify_signature
from hearthnet.wire.codec import MsgLimits, pack, unpack_map

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_LAMPORT",
    "SCHEMA_VERSION",
    "Event",
    "replay_key",
    "sign_event",
]

SCHEMA_VERSION = 1
MAX_EVENT_BYTES = 64 * 1024
MAX_LAMPORT = (1 << 53) - 1  # also bounds seq and wall_clock; fits SQLite INTEGER
_MAX_COMMUNITY_ID = 128
_MAX_EVENT_TYPE = 64
_EVENT_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*")
_FIELDS = frozenset(
    {
        "schema_version",
        "event_id",
        "lamport",
        "wall_clock",
        "community_id",
        "author",
        "seq",
        "event_type",
        "data",
    }
)
_LIMITS = MsgLimits(
    max_bin_len=MAX_EVENT_BYTES,
    max_str_len=MAX_EVENT_BYTES,
    max_array_len=4096,
    max_map_len=1024,
    max_ext_len=0,
)


@dataclass(frozen=True)
class Event:
    """A verified, decoded event; ``body`` holds the exact signed bytes."""

    body: bytes
    signature: bytes
    schema_version: int
    event_id: str
    lamport: int
    wall_clock: int
    community_id: str
    author: str
    seq: int
    event_type: str
    data: dict[str, Any]

    @property
    def key(self) -> tuple[int, str]:
        """The replay-order key ``(lamport, event_id)``."""
        return (self.lamport, self.event_id)

    def to_wire(self) -> dict[str, Any]:
        return {"body": self.body, "sig": self.signature}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Event:
        """Parse a received event; the signature is checked over the exact body bytes.

        Raises only :class:`BusError` subclasses: ``InvalidSignature`` for a bad
        signature, ``BadRequest`` for anything malformed.
        """
        if not isinstance(wire, Mapping):
            raise BadRequest("an event on the wire is a map {body, sig}")
        body = wire.get("body")
        sig = wire.get("sig")
        if not isinstance(body, bytes) or not isinstance(sig, bytes):
            raise BadRequest("an event on the wire needs bytes 'body' and 'sig'")
        fields = _unpack_body(body)
        author = fields.get("author")
        if not isinstance(author, str):
            raise BadRequest("event author must be a node id string")
        verify_signature(author, body, sig)
        return _build(body, sig, fields)

    @classmethod
    def from_stored(cls, body: bytes, signature: bytes) -> Event:
        """Decode an event read back from our own log (verified when it was stored)."""
        return _build(body, signature, _unpack_body(body))

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly view: bytes become hex, the signature is hex."""
        return {
            "schema_version": self.schema_version,
            "event_id": self.event_id,
            "lamport": self.lamport,
            "wall_clock": self.wall_clock,
            "community_id": self.community_id,
            "author": self.author,
            "seq": self.seq,
            "event_type": self.event_type,
            "data": _jsonable(self.data),
            "signature": self.signature.hex(),
        }


def replay_key(event: Event) -> tuple[int, str]:
    """Sort key of the replay order: Lamport time, ties broken by event id."""
    return (event.lamport, event.event_id)


def sign_event(
    identity: Identity,
    *,
    community_id: str,
    event_type: str,
    data: Mapping[str, Any],
    lamport: int,
    seq: int,
    wall_clock: int | None = None,
) -> Event:
    """Build and sign an event authored by ``identity``; validated like a received one.

    The event id is derived from the author, ``seq`` and the wall clock.
    """
    now = time.time_ns() // 1_000_000 if wall_clock is None else wall_clock
    if type(seq) is not int or not 1 <= seq <= MAX_LAMPORT:
        raise BadRequest("event field 'seq' must be an integer in [1, 2^53)")
    fields: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_ulid(identity.node_id, seq, now_ms=now),
        "lamport": lamport,
        "wall_clock": now,
        "community_id": community_id,
        "author": identity.node_id,
        "seq": seq,
        "event_type": event_type,
        "data": dict(data),
    }
    body = pack(fields)
    if len(body) > MAX_EVENT_BYTES:
        raise BadRequest(f"event body is {len(body)} bytes; the limit is {MAX_EVENT_BYTES}")
    return _build(body, identity.sign(body), _unpack_body(body))


def _unpack_body(body: bytes) -> dict[str, Any]:
    if len(body) > MAX_EVENT_BYTES:
        raise BadRequest(f"event body is {len(body)} bytes; the limit is {MAX_EVENT_BYTES}")
    try:
        return unpack_map(body, limits=_LIMITS)
    except BusError as exc:
        raise BadRequest(f"event body: {exc.message}") from exc
    except RecursionError as exc:  # absurdly nested data
        raise BadRequest("event body is nested too deeply") from exc


def _int_field(fields: Mapping[str, Any], name: str, low: int) -> int:
    value = fields[name]
    if type(value) is not int or not low <= value <= MAX_LAMPORT:
        raise BadRequest(f"event field {name!r} must be an integer in [{low}, 2^53)")
    return value


def _build(body: bytes, signature: bytes, fields: Mapping[str, Any]) -> Event:
    keys = set(fields)
    if keys != _FIELDS:
        missing = sorted(_FIELDS - keys)
        extra = sorted(str(k) for k in keys - _FIELDS)
        raise BadRequest(f"event body fields wrong: missing {missing}, unexpected {extra[:5]}")
    if type(fields["schema_version"]) is not int or fields["schema_version"] != SCHEMA_VERSION:
        raise BadRequest(f"unsupported event schema_version {fields['schema_version']!r:.20}")
    event_id = fields["event_id"]
    if not is_ulid(event_id):
        raise BadRequest("event_id must be a 26-character upper-case ULID")
    community_id = fields["community_id"]
    if not isinstance(community_id, str) or not 0 < len(community_id) <= _MAX_COMMUNITY_ID:
        raise BadRequest("community_id must be a non-empty string of at most 128 chars")
    author = fields["author"]
    if not isinstance(author, str):
        raise BadRequest("event author must be a node id string")
    event_type = fields["event_type"]
    if (
        not isinstance(event_type, str)
        or len(event_type) > _MAX_EVENT_TYPE
        or _EVENT_TYPE_RE.fullmatch(event_type) is None
    ):
        raise BadRequest("event_type must look like 'member.invited' (lower-case dotted, <= 64 chars)")
    data = fields["data"]
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise BadRequest("event data must be a map with string keys")
    seq = _int_field(fields, "seq", 1)
    if not event_id_bound_to(event_id, author, seq):
        raise BadRequest("event_id is not the one bound to the event's author and seq")
    if not isinstance(signature, bytes) or len(signature) != 64:
        raise InvalidSignature("event signature must be 64 bytes")
    return Event(
        body=bytes(body),
        signature=bytes(signature),
        schema_version=SCHEMA_VERSION,
        event_id=event_id,
        lamport=_int_field(fields, "lamport", 1),
        wall_clock=_int_field(fields, "wall_clock", 0),
        community_id=community_id,
        author=author,
        seq=seq,
        event_type=event_type,
        data=data,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
