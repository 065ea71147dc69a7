"""Length-prefixed frames: round trips at any split, truncation, size cap; batches of messages."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hearthnet.errors import ProtocolError
from hearthnet.wire.frames import HEADER_LEN, FrameDecoder, encode_batch, encode_frame, split_batch

MAX = 4096
payloads = st.lists(st.binary(max_size=600), max_size=20)


@given(payloads, st.lists(st.integers(min_value=0, max_value=20_000), max_size=30))
def test_round_trip_split_at_arbitrary_boundaries(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(p, max_frame=MAX) for p in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder(max_frame=MAX)
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        out.extend(decoder.feed(stream[start:end]))
    assert out == frames
    assert decoder.buffered == 0


@given(st.binary(min_size=1, max_size=600), st.data())
def test_truncated_input_yields_no_frame(payload: bytes, data: st.DataObject) -> None:
    encoded = encode_frame(payload, max_frame=MAX)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    decoder = FrameDecoder(max_frame=MAX)
    assert decoder.feed(encoded[:cut]) == []
    assert decoder.buffered == cut
    assert decoder.feed(encoded[cut:]) == [payload]


@given(st.integers(min_value=MAX + 1, max_value=2**32 - 1))
def test_oversized_declared_length_raises_before_payload(length: int) -> None:
    decoder = FrameDecoder(max_frame=MAX)
    with pytest.raises(ProtocolError):
        decoder.feed(struct.pack(">I", length))
    assert decoder.buffered == 0


def test_oversized_frame_behind_valid_frames_raises() -> None:
    decoder = FrameDecoder(max_frame=MAX)
    with pytest.raises(ProtocolError):
        decoder.feed(encode_frame(b"ok", max_frame=MAX) + struct.pack(">I", MAX + 1))


def test_encode_refuses_oversized_payload() -> None:
    with pytest.raises(ProtocolError):
        encode_frame(b"x" * (MAX + 1), max_frame=MAX)
    assert len(encode_frame(b"x" * MAX, max_frame=MAX)) == MAX + HEADER_LEN


def test_empty_payload_is_a_frame() -> None:
    assert FrameDecoder().feed(encode_frame(b"")) == [b""]


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20))
def test_a_batch_splits_into_its_messages(messages: list[bytes]) -> None:
    assert [bytes(m) for m in split_batch(encode_batch(messages))] == messages


@pytest.mark.parametrize(
    "plain",
    [
        b"",  # no message at all
        struct.pack(">I", 0),  # an empty message
        struct.pack(">I", 5) + b"abcd",  # runs past the end
        struct.pack(">I", 2) + b"ab" + b"\x00\x00",  # a length cut short after a message
        struct.pack(">I", 2) + b"ab" + struct.pack(">I", 0),  # an empty one after a message
    ],
    ids=["empty", "zero-length", "past-the-end", "cut-length", "empty-after"],
)
def test_a_malformed_batch_is_a_protocol_error(plain: bytes) -> None:
    with pytest.raises(ProtocolError):
        split_batch(plain)


@given(st.binary(max_size=200))
def test_any_plaintext_splits_into_messages_or_is_a_protocol_error(plain: bytes) -> None:
    try:
        messages = split_batch(plain)
    except ProtocolError:
        return
    assert encode_batch([bytes(m) for m in messages]) == plain
