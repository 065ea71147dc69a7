"""Keepalives on a quiet link, and the verdict that a silent or stuck link is dead.

A peer that lost power or sits behind a cut network never sends the FIN or RST
that would tell us; a peer that keeps sending but stopped reading leaves our
writes stuck.  Both are found here, by time since the last sign of life.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import structlog

from hearthnet.transport.link import Link

log = structlog.get_logger("hearthnet.bus.session")


@dataclass(frozen=True)
class Liveness:
    """When to send a ``keepalive`` and when to give a silent link up."""

    keepalive_seconds: float = 3.0
    dead_after_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not (0 < self.keepalive_seconds and self.dead_after_seconds >= 2 * self.keepalive_seconds):
            raise ValueError("keepalive_seconds must be positive and dead_after_seconds at least twice it")


async def watch_link(link: Link, liveness: Liveness, send_keepalive: Callable[[], None]) -> str:
    """Call ``send_keepalive`` whenever we have been quiet for ``keepalive_seconds``; return why
    the link is dead once the peer has been silent (or our writes stuck) for ``dead_after_seconds``."""
    keepalive, dead_after = liveness.keepalive_seconds, liveness.dead_after_seconds
    tried = 0.0  # a keepalive stuck behind a full socket buffer is not sent again meanwhile
    while True:
        now = time.monotonic()
        silent = now - link.last_received
        if silent >= dead_after:
            log.warning("link_silent", peer=link.peer_id, seconds=round(silent, 1))
            return f"peer silent for {silent:.1f} s (dead after {dead_after:g} s)"
        blocked = link.write_stalled_for(now)
        if blocked >= dead_after:
            log.warning("link_write_stalled", peer=link.peer_id, seconds=round(blocked, 1))
            return f"peer stopped reading: a write made no progress for {blocked:.1f} s"
        quiet = now - max(link.last_sent, tried)
        if quiet >= keepalive:
            tried, quiet = now, 0.0
            send_keepalive()
        await anyio.sleep(max(min(keepalive - quiet, dead_after - silent, dead_after - blocked), 0.01))
