"""Front doors: the ways people and programs reach a node (control socket, CLI, web UI, the
OpenAI-compatible gateway and MCP).

Each is started by ``node.py`` from :func:`front_door_factories`, after the services, and
reaches them only through the bus.  Policy they share (which node hosts a corpus) lives in
modules of this package, not in one door.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc

if TYPE_CHECKING:
    from hearthnet.node import NodeParts

__all__ = ["FrontDoor", "FrontDoorFactory", "front_door_factories"]


class FrontDoor(Protocol):
    """A server the node runs in its task group: ``run`` reports started once it accepts."""

    name: str

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...


FrontDoorFactory = Callable[["NodeParts"], "FrontDoor | None"]


def control_door(parts: NodeParts) -> FrontDoor:
    from hearthnet.control import ControlServer

    return ControlServer(parts.config.control_socket, parts.bus)


def ui_door(parts: NodeParts) -> FrontDoor | None:
    if not parts.config.ui.enabled:
        return None
    from hearthnet.frontends.http.server import UiServer

    return UiServer(parts.config, parts.bus)


def front_door_factories() -> list[FrontDoorFactory]:
    return [control_door, ui_door]
