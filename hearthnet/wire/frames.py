"""Length-prefixed frames: a 4-byte big-endian length, then that many bytes.

The decoder is incremental and pure: feed it whatever bytes arrived, take out
the complete frames.  Inside an established link's sealed frame, the
plaintext is a batch of messages framed the same way (:func:`encode_batch`,
:func:`split_batch`).  A declared length over ``max_frame`` raises
``ProtocolError`` *before* anything is buffered for it, so a hostile length
never becomes an allocation.
"""

from __future__ import annotations

import struct

from hearthnet.errors import ProtocolError

HEADER = struct.Struct(">I")
HEADER_LEN = HEADER.size
DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB: a 256 KiB blob chunk plus envelope fits with room


def encode_frame(payload: bytes, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Prefix ``payload`` with its length; refuse to build an oversized frame."""
    if len(payload) > max_frame:
        raise ProtocolError(f"frame of {len(payload)} bytes exceeds the maximum of {max_frame}")
    return HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental frame splitter with a hard size cap."""

    __slots__ = ("_buf", "_max_frame")

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max_frame = max_frame

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def set_max_frame(self, max_frame: int) -> None:
        """Change the cap for frames not yet seen (a handshake uses a small one first)."""
        self._max_frame = max_frame

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame now complete, in order.

        Each frame is copied once, out of ``data`` itself when nothing was
        buffered before (the common case) or out of the buffer otherwise.
        """
        held = self._buf
        if held:
            held += data
            buf: bytes | bytearray = held
        else:
            buf = data
        frames: list[bytes] = []
        size = len(buf)
        offset = 0
        with memoryview(buf) as view:
            while size - offset >= HEADER_LEN:
                (length,) = HEADER.unpack_from(buf, offset)
                if length > self._max_frame:
                    self._buf = bytearray()
                    raise ProtocolError(
                        f"peer declared a frame of {length} bytes, maximum is {self._max_frame}"
                    )
                end = offset + HEADER_LEN + length
                if size < end:
                    break
                frames.append(bytes(view[offset + HEADER_LEN : end]))
                offset = end
            if buf is not held and offset < size:
                self._buf = bytearray(view[offset:])  # keep only the incomplete rest
        if buf is held and offset:
            del held[:offset]
        return frames


def encode_batch(messages: list[bytes]) -> bytes:
    """The plaintext of one sealed frame: each message as a 4-byte big-endian length and its bytes."""
    parts: list[bytes] = []
    for message in messages:
        parts.append(HEADER.pack(len(message)))
        parts.append(message)
    return b"".join(parts)


def split_batch(plain: bytes) -> list[memoryview]:
    """The messages of a sealed frame's plaintext (views into it), in order.

    At least one message, none empty, every declared length within what is left and
    nothing left over; anything else is a ``ProtocolError``.
    """
    size = len(plain)
    view = memoryview(plain)
    if size > HEADER_LEN and HEADER.unpack_from(plain)[0] == size - HEADER_LEN:
        return [view[HEADER_LEN:]]  # one message, the common case for a lone call
    messages: list[memoryview] = []
    offset = 0
    while offset < size:
        if size - offset < HEADER_LEN:
            raise ProtocolError("a sealed frame ends inside a message length")
        (length,) = HEADER.unpack_from(plain, offset)
        start = offset + HEADER_LEN
        offset = start + length
        if length == 0 or offset > size:
            raise ProtocolError("a message in a sealed frame is empty or runs past its end")
        messages.append(view[start:offset])
    if not messages:
        raise ProtocolError("a sealed frame holds no message")
    return messages
