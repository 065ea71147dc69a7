"""Bounded msgpack maps: round trips, and only ProtocolError on bad input."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.errors import ProtocolError
from hearthnet.wire.codec import (
    MAX_DEPTH,
    MsgLimits,
    Packer,
    nested_deeper,
    pack,
    unpack_map,
    value_problem,
    wire_shape_problem,
)

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


def _nested(depth: int) -> Any:
    """``depth`` maps and lists inside each other (a scalar at the bottom)."""
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 1000, 1024, 5000])
def test_a_message_nested_past_the_bound_is_a_protocol_error_whatever_the_depth(depth: int) -> None:
    """Python code reading a message recurses on it: ~1,000 levels would be a RecursionError
    (msgpack itself refuses only past 1,024).  Bytes built by hand: ``pack`` would refuse."""
    data = b"\x81\xa1k" + b"\x91" * (depth - 2) + b"\x80"  # {"k": [[...[{}]...]]}, ``depth`` levels
    with pytest.raises(ProtocolError, match=r"nested|StackError"):
        unpack_map(data)


def test_a_message_at_the_depth_bound_is_read() -> None:
    message = {"v": _nested(MAX_DEPTH - 1)}
    assert unpack_map(pack(message)) == message
    with pytest.raises(ProtocolError, match=f"nested more than {MAX_DEPTH} levels"):
        unpack_map(pack({"v": _nested(MAX_DEPTH)}))
    assert unpack_map(pack({"v": _nested(3)}), limits=MsgLimits(max_depth=4))
    with pytest.raises(ProtocolError):
        unpack_map(pack({"v": _nested(4)}), limits=MsgLimits(max_depth=4))


@settings(max_examples=300, deadline=None)
@given(value=values, pad=st.sampled_from([0, 10, 3000]), limit=st.integers(1, 6))
def test_the_depth_bound_is_exact_whether_bytes_are_counted_or_the_value_walked(
    value: Any, pad: int, limit: int
) -> None:
    """Small messages are measured by counting bytes that can open a map or list, large ones (or
    ones with many such bytes, here inside a binary) by walking: the verdict is the same."""
    message = {"v": value, "pad": b"\x90" * pad}
    try:
        unpack_map(pack(message), limits=MsgLimits(max_depth=limit))
    except ProtocolError as exc:
        assert "nested more than" in exc.message
        assert nested_deeper(message, limit)
    else:
        assert not nested_deeper(message, limit)


@given(maps)
def test_a_reused_packer_packs_as_pack_does_also_after_a_failure(message: dict[str, Any]) -> None:
    packer = Packer()
    with pytest.raises(ProtocolError, match="cannot be sent"):
        packer.pack({"bad": {1, 2}, **message})
    assert packer.pack(message) == pack(message)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            {"input": {"filter": {"page": 10**23}}},
            "input.filter.page is a number out of range (at most 2^63-1)",
        ),
        ({"input": {"n": -(2**70)}}, "input.n is a number out of range (at least -2^63)"),
        ({"input": {"query": "caf\udce9"}}, "input.query is text that is not valid UTF-8"),
        ({"input": {"texts": ["ok", "\ud800"]}}, "input.texts[1] is text that is not valid UTF-8"),
        ({"input": {"\udcff": 1}}, "input has a key that is not valid UTF-8 text"),
        ({"input": {"x": {1, 2}}}, "input.x is a set, which cannot be sent"),
    ],
)
def test_a_value_that_cannot_be_sent_is_named_with_its_place_and_problem(value: Any, problem: str) -> None:
    """What the user sees (row 12 of the hardening issue): never "OverflowError" or
    "UnicodeEncodeError", but which field and what is wrong with it."""
    assert (value_problem(value) or "").startswith(problem)
    with pytest.raises(ProtocolError) as refused:
        pack(value)
    assert problem in refused.value.message
    assert "Error" not in refused.value.message


def test_value_problem_names_nesting_and_accepts_what_can_be_sent() -> None:
    assert "nested more than 8 levels deep" in (value_problem({"a": _nested(10)}, max_depth=8) or "")
    fine = {"a": [1, 2.5, None, True, b"x", "text", {"b": -(2**63)}], "c": 2**63 - 1}
    assert value_problem(fine) is None
    assert value_problem(_nested(20_000), max_depth=1 << 30) is None  # no recursion, whatever the depth


_SMALL = MsgLimits(max_bin_len=8, max_str_len=8, max_array_len=4, max_map_len=4, max_depth=4)
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
