"""The signed event envelope: exact-bytes signatures, strict decoding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hearthnet.errors import BadRequest, BusError, InvalidSignature
from hearthnet.events import SCHEMA_VERSION, Event, is_ulid, sign_event
from hearthnet.events.envelope import MAX_LAMPORT
from hearthnet.events.ulid import event_id_bound_to
from hearthnet.identity.keys import Identity
from hearthnet.wire.codec import pack, unpack_map

ALICE = Identity.from_seed(b"a" * 32)
BOB = Identity.from_seed(b"b" * 32)


_ARGS: dict[str, Any] = {
    "community_id": "hc1:test",
    "event_type": "member.invited",
    "data": {"node_id": BOB.node_id, "level": "member"},
    "lamport": 3,
    "seq": 2,
    "wall_clock": 1_700_000_000_000,
}


def _event(**overrides: Any) -> Event:
    return sign_event(ALICE, **{**_ARGS, **overrides})


def _fields(event: Event) -> dict[str, Any]:
    return unpack_map(event.body)


@settings(max_examples=100)
@given(st.integers(1, MAX_LAMPORT), st.integers(0, MAX_LAMPORT))
def test_event_id_is_bound_to_author_and_seq(seq: int, wall_clock: int) -> None:
    event = _event(seq=seq, wall_clock=wall_clock)
    assert is_ulid(event.event_id)
    assert event_id_bound_to(event.event_id, ALICE.node_id, seq)
    assert not event_id_bound_to(event.event_id, BOB.node_id, seq)
    assert not event_id_bound_to(event.event_id, ALICE.node_id, seq + 1)
    assert Event.from_wire(event.to_wire()) == event


def test_nobody_can_sign_a_body_under_another_authors_event_id() -> None:
    """Else a member could squat on e.g. its own revocation's id and nodes would refuse the real one."""
    victim = _event(seq=7)
    fields = unpack_map(sign_event(BOB, **{**_ARGS, "seq": 1}).body)
    fields["event_id"] = victim.event_id
    body = pack(fields)
    with pytest.raises(BadRequest, match="bound"):
        Event.from_wire({"body": body, "sig": BOB.sign(body)})
    # the author itself cannot reuse one of its ids for another seq either
    fields = _fields(victim)
    fields["seq"] = 8
    with pytest.raises(BadRequest, match="bound"):
        Event.from_wire(_signed(fields))


def test_sign_verify_round_trip() -> None:
    event = _event()
    back = Event.from_wire(event.to_wire())
    assert back == event
    assert back.author == ALICE.node_id
    assert back.schema_version == SCHEMA_VERSION
    assert back.key == (3, event.event_id)
    assert is_ulid(back.event_id)
    assert back.data == {"node_id": BOB.node_id, "level": "member"}


def test_to_json_is_plain() -> None:
    event = _event(data={"blob": b"\x01\x02", "n": 1})
    out = event.to_json()
    assert out["signature"] == event.signature.hex()
    assert out["data"] == {"blob": "0102", "n": 1}
    assert out["author"] == ALICE.node_id


@pytest.mark.parametrize("where", ["body", "sig"])
def test_flipped_bit_is_invalid_signature(where: str) -> None:
    wire = _event().to_wire()
    raw = bytearray(wire[where])
    # flip a bit inside a string value so the body still decodes
    index = raw.index(b"hc1:test") + 4 if where == "body" else 10
    raw[index] ^= 0x01
    wire[where] = bytes(raw)
    with pytest.raises(InvalidSignature):
        Event.from_wire(wire)


def test_claiming_another_author_is_invalid_signature() -> None:
    fields = _fields(_event())
    fields["author"] = BOB.node_id  # claims Bob, signed by Alice
    body = pack(fields)
    with pytest.raises(InvalidSignature):
        Event.from_wire({"body": body, "sig": ALICE.sign(body)})


def test_resigned_different_body_verifies_over_exact_bytes() -> None:
    event = _event()
    fields = _fields(event)
    fields["lamport"] = 4
    with pytest.raises(InvalidSignature):
        Event.from_wire({"body": pack(fields), "sig": event.signature})


def _signed(obj: Any) -> dict[str, bytes]:
    body = pack(obj)
    return {"body": body, "sig": ALICE.sign(body)}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lamport", "3"),
        ("lamport", 0),
        ("lamport", True),
        ("lamport", 1 << 60),
        ("seq", -1),
        ("wall_clock", 1.5),
        ("event_id", "not-a-ulid"),
        ("event_id", "01hzy3k6m8q9r7s5t4v2w1x0yz"),
        ("community_id", ""),
        ("event_type", "Member Invited"),
        ("event_type", 7),
        ("data", [1, 2]),
        ("schema_version", 2),
    ],
)
def test_wrong_field_types_are_bad_request(field: str, value: Any) -> None:
    fields = _fields(_event())
    fields[field] = value
    with pytest.raises(BadRequest):
        Event.from_wire(_signed(fields))


def test_missing_or_extra_fields_are_bad_request() -> None:
    fields = _fields(_event())
    del fields["seq"]
    with pytest.raises(BadRequest):
        Event.from_wire(_signed(fields))
    fields = _fields(_event())
    fields["extra"] = 1
    with pytest.raises(BadRequest):
        Event.from_wire(_signed(fields))


@pytest.mark.parametrize(
    "wire",
    [
        None,
        [],
        {},
        {"body": "text", "sig": b"x" * 64},
        {"body": b"\x93\x01\x02\x03", "sig": b"x" * 64},  # a list, not a map
        {"body": b"\xc1", "sig": b"x" * 64},
        {"body": pack({"author": 5}), "sig": b"x" * 64},
    ],
)
def test_non_map_body_is_bad_request(wire: Any) -> None:
    with pytest.raises(BadRequest):
        Event.from_wire(wire)


def test_author_not_a_node_id_is_invalid_signature() -> None:
    fields = _fields(_event())
    fields["author"] = "rsa:abc"
    with pytest.raises(InvalidSignature):
        Event.from_wire(_signed(fields))


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.floats(allow_nan=False),
)
_values = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_FIELD_NAMES = [
    "schema_version",
    "event_id",
    "lamport",
    "wall_clock",
    "community_id",
    "author",
    "seq",
    "event_type",
    "data",
    "other",
]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=200).map(lambda b: {"body": b, "sig": b"\x00" * 64}),
        st.dictionaries(st.sampled_from(_FIELD_NAMES), _values, max_size=10).map(_signed),
        st.dictionaries(st.text(max_size=5), _values, max_size=3),
        _values,
    )
)
def test_from_wire_only_raises_bus_errors(wire: Any) -> None:
    try:
        Event.from_wire(wire)
    except BusError:
        pass


@settings(max_examples=100)
@given(st.binary(min_size=1, max_size=400), st.integers(min_value=0))
def test_any_flipped_bit_in_body_never_verifies(seed_noise: bytes, position: int) -> None:
    wire = _event(data={"note": seed_noise}).to_wire()
    raw = bytearray(wire["body"])
    bit = position % (len(raw) * 8)
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(BusError):
        Event.from_wire({"body": bytes(raw), "sig": wire["sig"]})
