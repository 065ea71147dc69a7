"""The shape every service has: registrations, start, stop, health."""

from __future__ import annotations

from typing import Any, Protocol

from hearthnet.bus.descriptors import Registration


class Service(Protocol):
    """A service offers capabilities on the bus; it never imports another service."""

    name: str

    def registrations(self) -> list[Registration]:
        """Capabilities to register once ``start`` has returned."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> dict[str, Any]: ...
