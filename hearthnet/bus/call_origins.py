"""Where a call comes from: a peer (:class:`RemoteCallContext`, over a link) or this node itself
(:class:`LocalCallContext`); both are the :class:`~hearthnet.bus.context.CallContext` a handler sees."""

from __future__ import annotations

from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import Version
from hearthnet.bus.session import WINDOW, IncomingCall
from hearthnet.community.levels import Level


class RemoteCallContext(CallContext):
    """A call that arrived over a link."""

    def __init__(
        self,
        incoming: IncomingCall,
        *,
        version: Version,
        caller_level: Level,
        deadline: float,
    ) -> None:
        req = incoming.request
        self._incoming = incoming
        self.capability = req.capability
        self.version = version
        self.params = req.params
        self.input = req.input
        self.caller = incoming.session.peer_id
        self.caller_level = caller_level
        self.is_local = False
        self.deadline = deadline
        self.trace_id = req.trace_id

    async def send(self, frame: dict[str, Any]) -> None:
        await self._incoming.send_frame(frame)

    async def receive(self) -> dict[str, Any] | None:
        return await self._incoming.receive_input()


class LocalCallContext(CallContext):
    """A call made by this node (CLI, a service) to one of its own handlers.

    A streamed call's frames flow through bounded memory streams, so
    backpressure holds locally exactly as it does over a link.  A plain call
    has none (it is the common, latency-sensitive case: an embedding for a
    query): its frames are dropped and it has no input frames, as over a link.
    """

    frames_tx: MemoryObjectSendStream[dict[str, Any]]
    frames_rx: MemoryObjectReceiveStream[dict[str, Any]]
    input_tx: MemoryObjectSendStream[dict[str, Any] | None]
    input_rx: MemoryObjectReceiveStream[dict[str, Any] | None]

    def __init__(
        self,
        *,
        capability: str,
        version: Version,
        params: dict[str, Any],
        input: dict[str, Any],
        caller: str,
        caller_level: Level,
        deadline: float,
        trace_id: str,
        stream: bool,
    ) -> None:
        self.capability = capability
        self.version = version
        self.params = params
        self.input = input
        self.caller = caller
        self.caller_level = caller_level
        self.is_local = True
        self.deadline = deadline
        self.trace_id = trace_id
        self.stream = stream
        if stream:
            self.frames_tx, self.frames_rx = anyio.create_memory_object_stream[dict[str, Any]](WINDOW)
            self.input_tx, self.input_rx = anyio.create_memory_object_stream[dict[str, Any] | None](WINDOW)

    async def send(self, frame: dict[str, Any]) -> None:
        if not self.stream:
            return
        try:
            await self.frames_tx.send(frame)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the caller stopped listening; the handler's result still counts

    async def receive(self) -> dict[str, Any] | None:
        if not self.stream:
            return None  # a plain call has no input frames
        try:
            return await self.input_rx.receive()
        except anyio.EndOfStream:
            return None
