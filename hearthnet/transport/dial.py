"""Dial several addresses of one peer, staggered in parallel ("happy eyeballs", RFC 8305).

The first attempt starts at once; each next one starts when the previous one failed or
``stagger`` (250 ms) has passed without it finishing.  The first attempt that completes (for a
link: its handshake) wins; the others are cancelled, and one that completes anyway in the same
instant is closed.  An address that swallows packets (a firewall's drop, a renumbered device)
then costs ``stagger``, not a connect timeout, before the good one is tried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from hearthnet.errors import BusError, Partition

__all__ = ["STAGGER", "DialFailed", "dial_first"]

STAGGER = 0.25
T = TypeVar("T")


class DialFailed(Partition):
    """Every address failed; ``errors`` holds each one's error, by address, in dialling order."""

    def __init__(self, message: str, errors: dict[str, BaseException]) -> None:
        super().__init__(message)
        self.errors = errors


async def dial_first(
    addresses: Sequence[str],
    attempt: Callable[[str], Awaitable[T]],
    *,
    close: Callable[[T], Awaitable[None]],
    stagger: float = STAGGER,
) -> tuple[str, T]:
    """``(address, result)`` of the first ``attempt(address)`` to succeed; ``DialFailed`` if none
    does.  ``close`` disposes of a result that came too late (another attempt won first)."""
    if not addresses:
        raise DialFailed("no address to dial", {})
    errors: dict[str, BaseException] = {}
    winner: list[tuple[str, T]] = []

    async with anyio.create_task_group() as tg:

        async def one(address: str, failed: anyio.Event) -> None:
            try:
                result = await attempt(address)
            except (BusError, OSError, ValueError) as exc:
                errors[address] = exc
                failed.set()
                return
            if winner:
                with anyio.CancelScope(shield=True):
                    await close(result)
                return
            winner.append((address, result))
            tg.cancel_scope.cancel()

        for address in addresses:
            failed = anyio.Event()
            tg.start_soon(one, address, failed)
            with anyio.move_on_after(stagger):
                await failed.wait()
    if winner:
        return winner[0]
    reasons = "; ".join(f"{a}: {getattr(e, 'message', None) or e}" for a, e in errors.items())
    raise DialFailed(f"could not reach any address ({reasons})", errors)
