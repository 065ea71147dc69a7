"""Introspection: ``node.ping|echo|info|stats`` (members), ``node.dial_back`` (a member asks to be
dialled at one of its own addresses) and ``node.status`` (this node only)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.contracts.node import DIAL_BACK, PING
from hearthnet.errors import BadRequest
from hearthnet.services.node.probe import DIAL_BACK_SECONDS, Advertised, dial_back

MAX_ECHO_DELAY_MS = 5000

StatusSource = Callable[[], dict[str, Any]]


@dataclass(kw_only=True, eq=False)
class NodeService:
    """Answers the introspection calls every node offers, like NATS micro's services."""

    name = "node"

    info: StatusSource
    stats: StatusSource
    status: StatusSource
    advertised: Advertised = lambda _node_id: ()
    echo_concurrency: int = 32
    started: float = field(default_factory=time.time, init=False)

    def registrations(self) -> list[Registration]:
        def desc(name: str, *, local_only: bool = False) -> CapabilityDescriptor:
            return CapabilityDescriptor(
                name, (1, 0), max_concurrent=64, timeout_seconds=5.0, idempotent=True, local_only=local_only
            )

        return [
            Registration(desc(PING), self._ping),
            Registration(
                CapabilityDescriptor(
                    "node.echo",
                    (1, 0),
                    max_concurrent=self.echo_concurrency,
                    timeout_seconds=10.0,
                    idempotent=True,
                ),
                self._echo,
            ),
            Registration(desc("node.info"), self._handle_info),
            Registration(desc("node.stats"), self._handle_stats),
            Registration(desc("node.status", local_only=True), self._handle_status),
            Registration(
                CapabilityDescriptor(
                    DIAL_BACK,
                    (1, 0),
                    max_concurrent=2,
                    timeout_seconds=DIAL_BACK_SECONDS + 2.0,
                    idempotent=True,
                ),
                self._dial_back,
            ),
        ]

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def health(self) -> dict[str, Any]:
        return {"ok": True, "uptime_s": round(time.time() - self.started, 1)}

    async def _ping(self, ctx: CallContext) -> dict[str, Any]:
        return {"pong": True, "time_ms": int(time.time() * 1000)}

    async def _echo(self, ctx: CallContext) -> dict[str, Any]:
        """Return ``payload`` after ``delay_ms`` (<= 5 s): for latency probes and load tests."""
        delay = ctx.input.get("delay_ms", 0)
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= MAX_ECHO_DELAY_MS:
            raise BadRequest(f"delay_ms must be an integer from 0 to {MAX_ECHO_DELAY_MS}")
        if delay:
            await anyio.sleep(delay / 1000)
        return {"payload": ctx.input.get("payload")}

    async def _handle_info(self, ctx: CallContext) -> dict[str, Any]:
        return self.info()

    async def _handle_stats(self, ctx: CallContext) -> dict[str, Any]:
        return self.stats()

    async def _handle_status(self, ctx: CallContext) -> dict[str, Any]:
        return self.status()

    async def _dial_back(self, ctx: CallContext) -> dict[str, Any]:
        return await dial_back(ctx.caller, dict(ctx.input), self.advertised)
