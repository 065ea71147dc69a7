"""Bounded msgpack encoding of wire messages.

Every message on the wire is one msgpack *map* with string keys.  Decoding
enforces limits on container and string sizes so a peer cannot make us build
huge structures, and maps all msgpack failures to ``ProtocolError``.
"""

from __future__ import annotations

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
