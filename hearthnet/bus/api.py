"""The bus as services and clients use it (Protocols, so services never import the bus class):
:class:`BusAPI` for calls and registrations, :class:`PeerBus` for the services that also talk to
peers beside calls (the community's gossip notices, its catalog of hosts)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, Version
from hearthnet.bus.sightings import Sighting


class CallStream(abc.ABC):
    """The caller's side of a streamed call."""

    @abc.abstractmethod
    async def send(self, frame: dict[str, Any]) -> None:
        """Send one input frame to the handler (flow controlled)."""

    @abc.abstractmethod
    async def end_input(self) -> None:
        """Tell the handler no more input frames follow."""

    @abc.abstractmethod
    def frames(self) -> AsyncIterator[dict[str, Any]]:
        """The handler's stream frames, in order, until ``done`` or ``error``."""

    @abc.abstractmethod
    async def result(self) -> CallResult:
        """Wait for ``done`` (returns) or ``error`` (raises the rebuilt ``BusError``)."""


@dataclass(frozen=True)
class ProviderInfo:
    """One provider of a capability as the registry knows it."""

    node_id: str
    descriptor: CapabilityDescriptor
    is_local: bool


class BusAPI(Protocol):
    """The capability bus seen from a service."""

    @property
    def node_id(self) -> str: ...

    async def call(
        self,
        capability: str,
        version: Version = (1, 0),
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult: ...

    def stream(
        self,
        capability: str,
        version: Version = (1, 0),
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> AbstractAsyncContextManager[CallStream]: ...

    def register(self, registration: Registration) -> None: ...

    def unregister(self, name: str, params: Mapping[str, Any]) -> None: ...

    def providers(
        self, capability: str, version: Version = (1, 0), params: Mapping[str, Any] | None = None
    ) -> list[ProviderInfo]: ...

    def offers(self, capability: str, version: Version = (1, 0)) -> list[ProviderInfo]:
        """Every descriptor of ``capability`` here and on connected peers, whatever its params.

        ``providers`` lists each node once (the one that would serve the params);
        this lists all of a node's registrations (e.g. one ``rag.query`` per corpus).
        """
        ...


NoticeCallback = Callable[[str, dict[str, Any]], Awaitable[None]]
"""``(peer, message)``: a notice a peer sent beside its calls."""
PeerCallback = Callable[[str], Coroutine[Any, Any, None]]
"""``(peer)``: a peer is up (its manifest is known)."""


class PeerBus(BusAPI, Protocol):
    """The bus with its peers, for services that talk to them beside calls."""

    @property
    def name(self) -> str:
        """This node's name, as its manifest gives it."""
        ...

    def connected(self) -> list[str]:
        """The peers with a link now."""
        ...

    def sighting(self, node_id: str) -> Sighting | None:
        """When ``node_id`` was last connected, and the name it gave."""
        ...

    def spawn_for(self, peer: str, fn: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        """Run ``fn(*args)`` as a task of ``peer``'s link (ends with it; nothing if not connected)."""
        ...

    def notify(self, peer: str, message: dict[str, Any]) -> None:
        """Send ``peer`` a notice, in its link's tasks (a peer that stopped reading holds up only itself)."""
        ...

    def on_notice(self, message_type: str, callback: NoticeCallback) -> None:
        """Call ``callback`` with each notice of ``message_type`` a peer sends."""
        ...

    def on_peer_up(self, callback: PeerCallback) -> None:
        """Call ``callback`` (in the peer's link's tasks) whenever a peer is up."""
        ...
