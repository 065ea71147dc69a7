"""Bounded msgpack encoding of wire messages.

Every message on the wire is one msgpack *map* with string keys.  Decoding
enforces limits on container and string sizes and on nesting depth, so a peer
cannot make us build huge structures or values that Python code walking them
would recurse on without end, and maps all msgpack failures to ``ProtocolError``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import msgpack

from hearthnet.errors import ProtocolError

MAX_DEPTH = 64
"""Nesting a message may have: far more than any bus message needs (a ``rag.query`` filter at
its own limit is ~20 deep), far less than Python's recursion limit."""


@dataclass(frozen=True)
class MsgLimits:
    """Upper bounds applied while decoding one message."""

    max_bin_len: int = 1 << 20
    max_str_len: int = 1 << 20
    max_array_len: int = 100_000
    max_map_len: int = 10_000
    max_ext_len: int = 0
    max_depth: int = MAX_DEPTH
    """Maps and lists nested in one message, the message itself included."""


DEFAULT_LIMITS = MsgLimits()
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
"""The whole numbers a value may hold: 64-bit signed, what every msgpack implementation reads."""

_CONTAINER_BYTES = bytes(1 if 0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF else 0 for b in range(256))
"""``translate`` table: 1 for every byte that can open a msgpack map or array (fixmap, fixarray,
array 16/32, map 16/32), 0 for the rest."""
_COUNT_DEPTH_UP_TO = 2048
"""Messages up to this size are measured by counting such bytes (see :func:`unpack_map`)."""


def _unpacker(limits: MsgLimits) -> Any:
    """``msgpack.unpackb`` bound to ``limits``: every field but ``max_depth`` (checked here) is
    named as msgpack's own keyword for that bound."""
    bounds = {f.name: getattr(limits, f.name) for f in fields(limits) if f.name != "max_depth"}
    return functools.partial(msgpack.unpackb, raw=False, strict_map_key=True, use_list=True, **bounds)


_DEFAULT_UNPACK = _unpacker(DEFAULT_LIMITS)


def pack(obj: Any) -> bytes:
    """Encode ``obj`` (maps, lists, str, bytes, ints, floats, bools, None).

    A value msgpack cannot encode is a ``ProtocolError`` (code ``bad_request``) that says
    where and what, e.g. ``input.query is text that is not valid UTF-8``.
    """
    try:
        return msgpack.packb(obj, use_bin_type=True, strict_types=False)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise _unpackable(obj, exc) from exc


class Packer:
    """:func:`pack` with a reused msgpack packer: half the cost for small messages.

    Not thread-safe (one per link, used by the event loop's thread only).
    """

    __slots__ = ("_pack",)

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True, strict_types=False).pack

    def pack(self, obj: Any) -> bytes:
        """As :func:`pack` (the packer starts afresh after a failure)."""
        try:
            return self._pack(obj)  # type: ignore[no-any-return]
        except (TypeError, ValueError, OverflowError) as exc:
            raise _unpackable(obj, exc) from exc


def _unpackable(obj: Any, exc: Exception) -> ProtocolError:
    problem = value_problem(obj, max_depth=1 << 30)
    if problem is None:  # msgpack's own nesting limit (~5,000 levels)
        problem = f"the value is nested too deeply ({type(exc).__name__})"
    return ProtocolError(f"value cannot be sent: {problem}")


def unpack_map(data: bytes | memoryview, *, limits: MsgLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Decode exactly one msgpack map with string keys, within ``limits``.

    Depth: a value nested ``d`` deep has at least ``d`` map or array headers, each
    starting with a byte that can open one, so a small message with no more such
    bytes than the limit allows is within it without walking the decoded value.
    """
    unpack = _DEFAULT_UNPACK if limits is DEFAULT_LIMITS else _unpacker(limits)
    try:
        obj = unpack(data)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ProtocolError(f"malformed msgpack: {type(exc).__name__}") from exc
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise ProtocolError(f"malformed msgpack: {type(exc).__name__}") from exc
    if type(obj) is not dict:
        raise ProtocolError(f"a wire message must be a map, got {type(obj).__name__}")
    if (
        len(data) > _COUNT_DEPTH_UP_TO or bytes(data).translate(_CONTAINER_BYTES).count(1) > limits.max_depth
    ) and nested_deeper(obj, limits.max_depth):
        raise ProtocolError(f"malformed msgpack: a message nested more than {limits.max_depth} levels deep")
    return obj


def nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` has more than ``limit`` levels of maps and lists (a scalar has 0).

    One pass, level by level and without recursion (msgpack's decoder itself stops at
    1,024 levels; the code that reads a message would recurse long before that).
    """
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper: list[Any] = []
        for item in level:
            subs = item.values() if type(item) is dict else item
            deeper += [v for v in subs if type(v) is dict or type(v) is list]
        level = deeper
    return False


def value_problem(value: Any, *, where: str = "", max_depth: int = MAX_DEPTH) -> str | None:
    """What keeps ``value`` from being sent, in a user's terms, or ``None``.

    Names the place (``input.filter.page``, ``input.texts[3]``) and the problem:
    text that is not valid UTF-8 (a lone surrogate, as a file name or terminal in
    another encoding gives), a whole number beyond 64 bits, a map key that is not
    text, nesting beyond ``max_depth``, or a type that has no wire form.  Without
    recursion, so it is safe on any value a caller built.
    """
    stack: list[tuple[Any, str, int]] = [(value, where, 1)]
    while stack:
        item, path, depth = stack.pop()
        here = (path if len(path) <= 80 else path[:77] + "...") or "the value"
        if isinstance(item, dict | list | tuple):
            if depth > max_depth:
                return f"{here} is nested more than {max_depth} levels deep"
            if isinstance(item, dict):
                for key, sub in item.items():
                    if not isinstance(key, str):
                        return f"{here} has a map key that is not text ({type(key).__name__})"
                    if not _utf8(key):
                        return f"{here} has a key that is not valid UTF-8 text"
                    stack.append((sub, f"{path}.{key}" if path else key, depth + 1))
            else:
                stack.extend((sub, f"{path}[{i}]", depth + 1) for i, sub in enumerate(item))
        elif isinstance(item, str):
            if not _utf8(item):
                return f"{here} is text that is not valid UTF-8"
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                bound = "at most 2^63-1" if item > 0 else "at least -2^63"
                return f"{here} is a number out of range ({bound})"
        elif not isinstance(item, bytes | bytearray | memoryview):
            return (
                f"{here} is a {type(item).__name__}, which cannot be sent "
                "(maps, lists, text, bytes, numbers, true/false and null can)"
            )
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def wire_shape_problem(value: Any, *, limits: MsgLimits = DEFAULT_LIMITS) -> tuple[str, str] | None:
    """Why a peer's :func:`unpack_map` would refuse ``value`` inside a message, or ``None``.

    ``("key", where)`` for a map key that is not a string, ``("size", where)`` for a
    container or string over ``limits`` or nesting deeper than they allow (``value``
    sits one level inside its message).  A peer that receives such a message can only
    close the link (it cannot even read the call's id), so a sender checks what it did
    not build itself (a handler's answer) before sending it.  Quick passes; the place
    is worked out only when there is a problem.
    """
    if _surely_fine(value, limits):
        return None
    return _shape_problem(value, limits)


def _shape_problem(value: Any, limits: MsgLimits) -> tuple[str, str] | None:
    """The thorough pass: any container or string type, with the place of the first problem."""
    stack: list[tuple[Any, str, int]] = [(value, "", 2)]  # depth in the message around it
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list | tuple) and depth > limits.max_depth:
            where = (path if len(path) <= 80 else path[:77] + "...") or "the answer"
            return "size", f"{where} is nested more than {limits.max_depth - 1} levels deep"
        if isinstance(item, dict):
            if len(item) > limits.max_map_len:
                return (
                    "size",
                    f"{path or 'the answer'} has {len(item)} entries (at most {limits.max_map_len})",
                )
            for key, sub in item.items():
                if not isinstance(key, str):
                    return "key", f"{path or 'the answer'} has a {type(key).__name__} key {key!r:.40}"
                stack.append((key, f"{path or 'the answer'}: a key", depth + 1))
                stack.append((sub, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list | tuple):
            if len(item) > limits.max_array_len:
                return "size", f"{path} has {len(item)} items (at most {limits.max_array_len})"
            stack.extend((sub, f"{path}[{i}]", depth + 1) for i, sub in enumerate(item))
        elif isinstance(item, str):
            n = (
                len(item.encode("utf-8", "surrogatepass"))
                if len(item) * 4 > limits.max_str_len
                else len(item)
            )
            if n > limits.max_str_len:
                return "size", f"{path} is {n} bytes long"
        elif isinstance(item, bytes | bytearray | memoryview) and len(item) > limits.max_bin_len:
            return "size", f"{path} is {len(item)} bytes long"
    return None


def _surely_fine(value: Any, limits: MsgLimits) -> bool:
    """The quick pass: only exact builtin types, leaves checked in place, one level at a time
    (nesting counted as it goes); ``False`` means "look closer" (:func:`_shape_problem`), not
    necessarily a problem."""
    max_map, max_array, max_bin = limits.max_map_len, limits.max_array_len, limits.max_bin_len
    short = limits.max_str_len // 4  # a str this long is within the limit whatever it holds
    levels_left = limits.max_depth - 1  # ``value`` sits one level inside its message
    level = [value]
    while level:
        if levels_left <= 0:
            return False
        levels_left -= 1
        deeper: list[Any] = []
        for item in level:
            kind = type(item)
            subs: Iterable[Any]
            if kind is dict:
                if len(item) > max_map:
                    return False
                for key in item:
                    if type(key) is not str or len(key) > short:
                        return False
                subs = item.values()
            elif kind is list:
                if len(item) > max_array:
                    return False
                subs = item
            else:
                return False
            for sub in subs:
                t = type(sub)
                if t is str:
                    if len(sub) > short:
                        return False
                elif t is dict or t is list:
                    deeper.append(sub)
                elif t is bytes:
                    if len(sub) > max_bin:
                        return False
                elif t is not int and t is not float and t is not bool and sub is not None:
                    return False
        level = deeper
    return True
