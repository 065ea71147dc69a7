"""What a handler sees of one call, and what a caller holds of one call."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.bus.versions import Version
from hearthnet.community.levels import Level


class CallContext(abc.ABC):
    """One incoming call, as its handler sees it.

    ``send`` emits an ordered stream frame to the caller (progress, file
    chunks); it applies backpressure (a slow caller slows the handler).
    ``receive`` returns the caller's next input frame, or ``None`` once the
    caller has ended its input.  The bus ends the stream with exactly one
    ``done`` (the handler's return value) or ``error`` (a raised ``BusError``).
    """

    capability: str
    version: Version
    params: dict[str, Any]
    input: dict[str, Any]
    caller: str
    """Node id of the caller (this node's own id for local calls)."""
    caller_level: Level
    is_local: bool
    deadline: float
    """Absolute deadline on ``anyio.current_time()``'s clock."""
    trace_id: str

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - anyio.current_time())

    @abc.abstractmethod
    async def send(self, frame: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    async def receive(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class CallResult:
    """A completed call: the handler's output and meta, and who served it."""

    output: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    provider: str = ""
