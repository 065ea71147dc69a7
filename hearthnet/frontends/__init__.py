"""Front doors: the ways people and programs reach a node (control socket, CLI, web UI).

The node starts the servers among them (the control socket, the web UI) from a list of
factories in :mod:`hearthnet.node`, after its services; they reach the services only through
the bus.  Policy the doors share (which node hosts a corpus, every corpus of the mesh) lives in
:mod:`hearthnet.frontends.client.corpora`, not in one door.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import anyio.abc

__all__ = ["FrontDoor"]


class FrontDoor(Protocol):
    """A server the node runs in its task group: ``run`` reports started once it accepts."""

    name: str

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...
