"""The one-line invite token: round trip, forgery, expiry, garbage."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.community import InviteToken, Level, community_id_for, decode_token, encode_token
from hearthnet.errors import BadRequest, BusError, Expired, InvalidSignature
from hearthnet.events import new_ulid
from hearthnet.identity.keys import Identity
from hearthnet.wire.codec import pack, unpack_map

INVITER = Identity.from_seed(b"I" * 32)
INVITEE = Identity.from_seed(b"J" * 32)
MALLORY = Identity.from_seed(b"X" * 32)
NOW = 1_700_000_000_000


def _token(**overrides: object) -> InviteToken:
    args: dict[str, object] = {
        "community_id": community_id_for(INVITER.node_id, "Hearth"),
        "community_name": "Hearth",
        "inviter": INVITER.node_id,
        "addresses": ["192.168.1.20:7447", "hearth.local:7447", "[fe80::1]:7447"],
        "invitee": INVITEE.node_id,
        "level": Level.TRUSTED,
        "invite_event_id": new_ulid(now_ms=NOW),
        "expires_at": NOW + 3_600_000,
    }
    args.update(overrides)
    return InviteToken(**args)  # type: ignore[arg-type]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_round_trip_is_one_line() -> None:
    token = _token()
    text = encode_token(token, INVITER)
    assert text.startswith("hn1.") and "\n" not in text and " " not in text
    assert decode_token(text, now_ms=NOW) == token
    assert decode_token(f"  {text}\n", now_ms=NOW) == token


def test_only_the_inviter_can_sign() -> None:
    with pytest.raises(BadRequest):
        encode_token(_token(), MALLORY)


def test_tampered_body_is_invalid_signature() -> None:
    prefix, body, sig = encode_token(_token(), INVITER).split(".")
    fields = unpack_map(_unb64(body))
    fields["level"] = "anchor"
    with pytest.raises(InvalidSignature):
        decode_token(f"{prefix}.{_b64(pack(fields))}.{sig}", now_ms=NOW)


def test_tampered_signature_is_invalid_signature() -> None:
    prefix, body, sig = encode_token(_token(), INVITER).split(".")
    raw = bytearray(_unb64(sig))
    raw[0] ^= 1
    with pytest.raises(InvalidSignature):
        decode_token(f"{prefix}.{body}.{_b64(bytes(raw))}", now_ms=NOW)


def test_resigned_by_someone_else_is_invalid_signature() -> None:
    prefix, body, _ = encode_token(_token(), INVITER).split(".")
    forged = _b64(MALLORY.sign(_unb64(body)))
    with pytest.raises(InvalidSignature):
        decode_token(f"{prefix}.{body}.{forged}", now_ms=NOW)


def test_expired() -> None:
    text = encode_token(_token(), INVITER)
    with pytest.raises(Expired):
        decode_token(text, now_ms=NOW + 3_600_000)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "hn1.",
        "hn2.AAAA.AAAA",
        "hn1.!!!!.AAAA",
        "hn1.AAAA.AAAA",
        "hn1.a.b.c",
        "hn1." + "A" * 9000,
    ],
)
def test_garbage_is_bad_request(text: str) -> None:
    with pytest.raises(BadRequest):
        decode_token(text, now_ms=NOW)


@pytest.mark.parametrize(
    "override",
    [{"addresses": []}, {"addresses": ["no-port"]}, {"addresses": ["h:99999"]}, {"invite_event_id": "x"}],
)
def test_invalid_fields_are_refused(override: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        encode_token(_token(**override), INVITER)


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_decode_only_raises_bus_errors(text: str) -> None:
    try:
        decode_token("hn1." + text, now_ms=NOW)
    except BusError:
        pass


def test_a_token_carries_every_advertised_address_and_old_tokens_still_decode() -> None:
    addresses = ["192.168.1.20:7700", "[fd00::20]:7700", "100.64.0.7:7700", "vpn.example.net:7701"]
    token = _token(addresses=addresses)
    assert decode_token(encode_token(token, INVITER), now_ms=NOW).addresses == addresses
    # a token made before address lists (one address, the same body) is read as before
    old = encode_token(_token(addresses=["192.168.1.20:7447"]), INVITER)
    assert decode_token(old, now_ms=NOW).addresses == ["192.168.1.20:7447"]
