"""The bus as services and clients use it (a Protocol, so services never import the bus class)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, Version


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
