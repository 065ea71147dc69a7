"""Two ends of an authenticated link over an in-memory byte stream (the real handshake and AEAD)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.abc

from hearthnet.identity import Identity
from hearthnet.transport import Link, accept_link, initiate_link, memory_stream_pair

COMMUNITY = "ed25519:test-community"


async def memory_link_pair(
    wrap: Callable[[anyio.abc.ByteStream], anyio.abc.ByteStream] = lambda stream: stream,
) -> tuple[Link, Link]:
    """``(initiator, responder)``; ``wrap`` may wrap the initiator's stream (e.g. to count writes)."""
    alice, bob = Identity.generate(), Identity.generate()
    a_end, b_end = memory_stream_pair()
    out: dict[str, Link] = {}

    async def respond() -> None:
        out["b"] = await accept_link(
            b_end, identity=bob, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(respond)
        out["a"] = await initiate_link(
            wrap(a_end), identity=alice, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
        )
    return out["a"], out["b"]
