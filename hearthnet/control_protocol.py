"""Framing of the local control channel, shared by the server and the client (no heavy imports)."""

from __future__ import annotations

from typing import Any

import anyio.abc

from hearthnet.wire.codec import pack, unpack_map
from hearthnet.wire.frames import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame

CONTROL_MAX_FRAME = 16 * DEFAULT_MAX_FRAME


async def read_message(
    stream: anyio.abc.ByteStream, decoder: FrameDecoder, pending: list[bytes]
) -> dict[str, Any]:
    """Next framed msgpack map from ``stream`` (``anyio.EndOfStream`` at the end)."""
    while not pending:
        data = await stream.receive(65536)
        pending.extend(decoder.feed(data))
    return unpack_map(pending.pop(0))


async def write_message(stream: anyio.abc.ByteStream, message: dict[str, Any]) -> None:
    await stream.send(encode_frame(pack(message), max_frame=CONTROL_MAX_FRAME))
