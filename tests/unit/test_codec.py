"""Bounded msgpack maps: round trips, and only ProtocolError on bad input."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.errors import ProtocolError
from hearthnet.wire.codec import MsgLimits, pack, unpack_map, wire_shape_problem

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=50)
    | st.binary(max_size=50)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
maps = st.dictionaries(st.text(max_size=20), values, max_size=8)


@given(maps)
def test_round_trip_nested_maps(message: dict[str, Any]) -> None:
    assert unpack_map(pack(message)) == message


@given(st.lists(values, max_size=5) | scalars)
def test_non_map_top_level_is_protocol_error(value: Any) -> None:
    with pytest.raises(ProtocolError):
        unpack_map(pack(value))


@given(st.binary(max_size=200))
def test_garbage_bytes_raise_only_protocol_error(data: bytes) -> None:
    try:
        result = unpack_map(data)
    except ProtocolError:
        return
    assert isinstance(result, dict)  # some byte strings are valid maps


@given(maps, st.data())
def test_truncated_map_is_protocol_error(message: dict[str, Any], data: st.DataObject) -> None:
    encoded = pack(message)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(ProtocolError):
        unpack_map(encoded[:cut])


def test_trailing_bytes_are_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        unpack_map(pack({"a": 1}) + b"\x00")


def test_non_string_keys_are_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        unpack_map(msgpack.packb({1: 2}))


def test_limits_are_enforced() -> None:
    with pytest.raises(ProtocolError):
        unpack_map(pack({"a": [1] * 20}), limits=MsgLimits(max_array_len=10))
    with pytest.raises(ProtocolError):
        unpack_map(pack({"a": b"x" * 20}), limits=MsgLimits(max_bin_len=10))


def test_unencodable_value_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        pack({"a": object()})


_SMALL = MsgLimits(max_bin_len=8, max_str_len=8, max_array_len=4, max_map_len=4)
_leaves = st.one_of(st.integers(-5, 5), st.text(max_size=10), st.binary(max_size=10), st.none())
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(0, 3)), inner, max_size=6),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_wire_shape_problem_says_exactly_when_a_peer_would_refuse_the_value(value: object) -> None:
    problem = wire_shape_problem(value, limits=_SMALL)
    try:
        unpack_map(pack({"v": value}), limits=_SMALL)
    except ProtocolError:
        assert problem is not None
    else:
        assert problem is None
