"""Which services a node runs, decided from its config (used by ``Node``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hearthnet.node import NodeParts
    from hearthnet.services.base import Service


def service_factories() -> list[Callable[[NodeParts], Service | None]]:
    return []
