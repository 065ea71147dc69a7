"""Per-direction AEAD with implicit counters: tamper, replay, reorder all fail."""

from __future__ import annotations

import os

import nacl.bindings
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hearthnet.errors import ProtocolError
from hearthnet.transport.session import TAG_LEN, Session


def pair() -> tuple[Session, Session]:
    k1, k2 = os.urandom(32), os.urandom(32)
    return Session(k1, k2), Session(k2, k1)


def test_round_trip_both_directions() -> None:
    a, b = pair()
    for i in range(5):
        assert b.open(a.seal(b"to b %d" % i)) == b"to b %d" % i
        assert a.open(b.seal(b"to a %d" % i)) == b"to a %d" % i
    assert a.sent == b.received == 5


def test_ciphertext_is_rfc8439_as_in_libsodium() -> None:
    key_a, key_b = os.urandom(32), os.urandom(32)
    a = Session(key_a, key_b)
    for counter in range(3):
        nonce = bytes(4) + counter.to_bytes(8, "little")
        expected = nacl.bindings.crypto_aead_chacha20poly1305_ietf_encrypt(b"hello", None, nonce, key_a)
        assert a.seal(b"hello") == expected


@given(st.binary(max_size=64), st.data())
def test_any_flipped_bit_fails(plaintext: bytes, data: st.DataObject) -> None:
    a, b = pair()
    sealed = bytearray(a.seal(plaintext))
    assert len(sealed) == len(plaintext) + TAG_LEN
    bit = data.draw(st.integers(min_value=0, max_value=len(sealed) * 8 - 1))
    sealed[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(ProtocolError):
        b.open(bytes(sealed))


def test_replay_fails() -> None:
    a, b = pair()
    first = a.seal(b"pay 1")
    assert b.open(first) == b"pay 1"
    with pytest.raises(ProtocolError):
        b.open(first)


def test_reordered_frames_fail() -> None:
    a, b = pair()
    one, two = a.seal(b"1"), a.seal(b"2")
    with pytest.raises(ProtocolError):
        b.open(two)
    # once failed, the session stays failed even for the frame that was next
    with pytest.raises(ProtocolError):
        b.open(one)


def test_dropped_frame_fails() -> None:
    a, b = pair()
    a.seal(b"lost")
    with pytest.raises(ProtocolError):
        b.open(a.seal(b"after"))


def test_directions_use_different_keys() -> None:
    a, b = pair()
    to_b = a.seal(b"same")
    to_a = b.seal(b"same")
    assert to_b != to_a
    # a frame a sent cannot be reflected back to a as if b had sent it
    with pytest.raises(ProtocolError):
        a.open(to_b)
    with pytest.raises(ValueError):
        Session(b"k" * 32, b"k" * 32)


def test_truncated_ciphertext_fails() -> None:
    a, b = pair()
    with pytest.raises(ProtocolError):
        b.open(a.seal(b"x")[: TAG_LEN - 1])
