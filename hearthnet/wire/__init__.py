"""Pure wire codecs: length-prefixed frames and bounded msgpack maps."""

from hearthnet.wire.codec import MsgLimits, pack, unpack_map
from hearthnet.wire.frames import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame

__all__ = ["DEFAULT_MAX_FRAME", "FrameDecoder", "MsgLimits", "encode_frame", "pack", "unpack_map"]
