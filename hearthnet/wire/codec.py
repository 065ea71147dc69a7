"""Bounded msgpack encoding of wire messages.

Every message on the wire is one msgpack *map* with string keys.  Decoding
enforces limits on container and string sizes so a peer cannot make us build
huge structures, and maps all msgpack failures to ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from hearthnet.errors import ProtocolError


@dataclass(frozen=True)
class MsgLimits:
    """Upper bounds applied while decoding one message."""

    max_bin_len: int = 1 << 20
    max_str_len: int = 1 << 20
    max_array_len: int = 100_000
    max_map_len: int = 10_000
    max_ext_len: int = 0


DEFAULT_LIMITS = MsgLimits()


def pack(obj: Any) -> bytes:
    """Encode ``obj`` (maps, lists, str, bytes, ints, floats, bools, None)."""
    try:
        return msgpack.packb(obj, use_bin_type=True, strict_types=False)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"value cannot be encoded as msgpack: {type(exc).__name__}") from exc


def unpack_map(data: bytes, *, limits: MsgLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Decode exactly one msgpack map with string keys, within ``limits``."""
    try:
        obj = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_bin_len=limits.max_bin_len,
            max_str_len=limits.max_str_len,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=limits.max_ext_len,
        )
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ProtocolError(f"malformed msgpack: {type(exc).__name__}") from exc
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise ProtocolError(f"malformed msgpack: {type(exc).__name__}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"a wire message must be a map, got {type(obj).__name__}")
    return obj


def wire_shape_problem(value: Any, *, limits: MsgLimits = DEFAULT_LIMITS) -> tuple[str, str] | None:
    """Why a peer's :func:`unpack_map` would refuse ``value`` inside a message, or ``None``.

    ``("key", where)`` for a map key that is not a string, ``("size", where)`` for a
    container or string over ``limits``.  A peer that receives such a message can only
    close the link (it cannot even read the call's id), so a sender checks what it did
    not build itself (a handler's answer) before sending it.  One quick pass; the
    place is worked out only when there is a problem.
    """
    if _surely_fine(value, limits):
        return None
    return _shape_problem(value, limits)


def _shape_problem(value: Any, limits: MsgLimits) -> tuple[str, str] | None:
    """The thorough pass: any container or string type, with the place of the first problem."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            if len(item) > limits.max_map_len:
                return (
                    "size",
                    f"{path or 'the answer'} has {len(item)} entries (at most {limits.max_map_len})",
                )
            for key, sub in item.items():
                if not isinstance(key, str):
                    return "key", f"{path or 'the answer'} has a {type(key).__name__} key {key!r:.40}"
                stack.append((key, f"{path or 'the answer'}: a key"))
                stack.append((sub, f"{path}.{key}" if path else key))
        elif isinstance(item, list | tuple):
            if len(item) > limits.max_array_len:
                return "size", f"{path} has {len(item)} items (at most {limits.max_array_len})"
            stack.extend((sub, f"{path}[{i}]") for i, sub in enumerate(item))
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
    """The quick pass: only exact builtin types, leaves checked in place (a rag.query answer in
    ~36 us); ``False`` means "look closer" (:func:`_shape_problem`), not necessarily a problem."""
    max_map, max_array, max_bin = limits.max_map_len, limits.max_array_len, limits.max_bin_len
    short = limits.max_str_len // 4  # a str this long is within the limit whatever it holds
    stack = [value]
    while stack:
        item = stack.pop()
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
                stack.append(sub)
            elif t is bytes:
                if len(sub) > max_bin:
                    return False
            elif t is not int and t is not float and t is not bool and sub is not None:
                return False
    return True
