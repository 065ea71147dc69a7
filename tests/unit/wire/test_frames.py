"""Length-prefixed frames: round trips at any split, truncation, size cap."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hearthnet.errors import ProtocolError
from hearthnet.wire.frames import HEADER_LEN, FrameDecoder, encode_frame

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
