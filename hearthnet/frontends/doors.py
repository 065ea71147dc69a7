"""The servers among the front doors, as factories ``hearthnet node run`` gives the node: the
control socket, then the web UI (which also serves the gateway and ``/mcp``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hearthnet.node import FrontDoor, FrontDoorFactory, NodeParts

__all__ = ["control_door", "front_door_factories", "ui_door"]


def control_door(parts: NodeParts) -> FrontDoor:
    from hearthnet.frontends.control.server import ControlServer

    return ControlServer(parts.config.control_socket, parts.bus)


def ui_door(parts: NodeParts) -> FrontDoor | None:
    if not parts.config.ui.enabled:
        return None
    from hearthnet.frontends.http.server import UiServer

    return UiServer(parts.config, parts.bus)


def front_door_factories() -> list[FrontDoorFactory]:
    """Started after the services, in this order."""
    return [control_door, ui_door]
