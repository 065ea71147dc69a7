"""When each peer was last connected, and the name it gave (pure bookkeeping).

The bus notes a peer's name from each manifest and the time its link went
down; the peer manager saves both beside the addresses in ``peers.json``, so
that "offline since ..." survives a restart of this node.  Times are wall-clock
seconds since the epoch (they are shown to people and outlive the process).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_PEERS_REMEMBERED", "Sighting", "Sightings"]

MAX_PEERS_REMEMBERED = 1024
_MAX_NAME = 128


@dataclass(frozen=True)
class Sighting:
    """A peer as last seen: its name (from its manifest) and when its link went down (``None``: never
    seen to go down by this node, e.g. still connected)."""

    name: str = ""
    last_seen: float | None = None


class Sightings:
    """Per peer id, the last :class:`Sighting`; bounded (the oldest are forgotten first)."""

    def __init__(self) -> None:
        self._seen: dict[str, Sighting] = {}

    def named(self, node_id: str, name: str) -> None:
        """``node_id`` calls itself ``name`` (from a verified manifest)."""
        held = self._seen.get(node_id, Sighting())
        self._put(node_id, Sighting(name[:_MAX_NAME], held.last_seen))

    def went_down(self, node_id: str, at: float) -> None:
        held = self._seen.get(node_id, Sighting())
        self._put(node_id, Sighting(held.name, at))

    def get(self, node_id: str) -> Sighting | None:
        return self._seen.get(node_id)

    def _put(self, node_id: str, sighting: Sighting) -> None:
        self._seen.pop(node_id, None)  # most recent last: the oldest go first when full
        self._seen[node_id] = sighting
        while len(self._seen) > MAX_PEERS_REMEMBERED:
            del self._seen[next(iter(self._seen))]

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {n: {"name": s.name, "last_seen": s.last_seen} for n, s in self._seen.items()}

    def load(self, data: Any) -> None:
        """Take what :meth:`to_json` saved; anything malformed is skipped (the file is ours, but old)."""
        if not isinstance(data, Mapping):
            return
        for node_id, entry in list(data.items())[:MAX_PEERS_REMEMBERED]:
            if not isinstance(node_id, str) or not isinstance(entry, Mapping):
                continue
            name, at = entry.get("name"), entry.get("last_seen")
            if node_id in self._seen:
                continue  # seen in this run already: newer than the file
            when = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None
            self._put(
                node_id,
                Sighting(
                    name[:_MAX_NAME] if isinstance(name, str) else "",
                    when if when is not None and math.isfinite(when) else None,
                ),
            )
