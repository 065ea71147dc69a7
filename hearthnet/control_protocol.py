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
MAX_TIMEOUT_SECONDS = 1e9


def valid_timeout(value: object) -> bool:
    """Whether ``value`` is a call ``timeout`` the node takes: a number of seconds, 0 < t < 1e9."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < MAX_TIMEOUT_SECONDS


async def read_message(
    stream: anyio.abc.ByteStream, decoder: FrameDecoder, pending: list[bytes]
) -> dict[str, Any]:
    """Next framed msgpack map from ``stream`` (``anyio.EndOfStream`` at the end)."""
    while not pending:
        data = await stream.receive(65536)
        pending.extend(decoder.feed(data))
    return unpack_map(pending.pop(0), limits=CONTROL_LIMITS)


async def write_message(stream: anyio.abc.ByteStream, message: dict[str, Any]) -> None:
    await stream.send(encode_frame(pack(message), max_frame=CONTROL_MAX_FRAME))
