"""What every family's contract uses: :class:`Caller` (what a typed client calls through) and the
check that a call's input holds only the fields its capability knows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hearthnet.bus.context import CallResult
from hearthnet.errors import BadRequest

__all__ = ["Caller", "check_input_keys"]


class Caller(Protocol):
    """Anything that calls a capability by name: the node's bus (``BusAPI``), the control-socket
    client (``AsyncClient``), the web UI's gated bus for one login."""

    async def call(
        self,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult: ...


def check_input_keys(input: Mapping[Any, Any], allowed: set[str], capability: str = "") -> None:
    """Reject unknown input fields with ``bad_request`` naming (a few of) them (helps catch typos).

    A key may be bytes or a number (a peer's map): it is named, not a ``TypeError``.
    """
    unknown = sorted(str(k)[:40] for k in input if k not in allowed)
    if unknown:
        what = f"{capability} " if capability else ""
        raise BadRequest(f"unknown {what}input field(s): {', '.join(unknown[:8])}")
