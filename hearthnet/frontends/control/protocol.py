"""Framing of the local control channel, shared by the server and the client (no heavy imports)."""

from __future__ import annotations

from typing import Any

import anyio.abc

from hearthnet.wire.codec import MsgLimits, pack, unpack_map
from hearthnet.wire.frames import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame

CONTROL_MAX_FRAME = 16 * DEFAULT_MAX_FRAME
CONTROL_LIMITS = MsgLimits(
    max_bin_len=CONTROL_MAX_FRAME,
    max_str_len=CONTROL_MAX_FRAME,
    max_array_len=1_000_000,
    max_map_len=100_000,
)
"""Decoding limits of a control message: whatever fits its frame (a local answer may hold more
than a peer's, e.g. 256 embeddings of 1,536 dimensions in one 1.5 MiB field)."""
MAX_TIMEOUT_SECONDS = 24 * 3600.0
"""The longest call ``timeout`` the node takes: a day, the longest ``timeout_seconds`` a
capability may declare (a peer runs a call at most that long whatever it is asked)."""
MAX_INPUT_DEPTH = 32
"""How deep a call's ``params`` and ``input`` may nest (each counts as one level): well inside
the wire's ``MAX_DEPTH``, so what a node or a handler wraps around them still fits."""


def valid_timeout(value: object) -> bool:
    """Whether ``value`` is a call ``timeout`` the node takes: seconds, 0 < t <= a day."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT_SECONDS


def timeout_problem(value: object) -> str | None:
    """Why the node refuses ``value`` as a call ``timeout`` (``None``: it takes it)."""
    if valid_timeout(value):
        return None
    shown = repr(value) if not isinstance(value, float) else f"{value:g}"
    return (
        f"timeout must be a finite number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS:.0f} "
        f"(a day), got {shown[:40]}"
    )


async def read_message(
    stream: anyio.abc.ByteStream, decoder: FrameDecoder, pending: list[bytes]
) -> dict[str, Any]:
    """Next framed msgpack map from ``stream`` (``anyio.EndOfStream`` at the end)."""
    while not pending:
        data = await stream.receive(65536)
        pending.extend(decoder.feed(data))
    return unpack_map(pending.pop(0), limits=CONTROL_LIMITS)


def encode_message(message: dict[str, Any]) -> bytes:
    """``message`` as one control frame (``ProtocolError`` if it cannot be encoded or is too large)."""
    return encode_frame(pack(message), max_frame=CONTROL_MAX_FRAME)


async def write_message(stream: anyio.abc.ByteStream, message: dict[str, Any]) -> None:
    await stream.send(encode_message(message))
