"""The names and last sightings of the community's nodes, remembered by the UI.

A member's name is known only while it is connected (from its signed manifest); the Mesh page
still names it, with when it was last seen, after it goes offline or the node restarts.
Kept in ``<home>/ui-nodes.json`` (written atomically, at most once a minute unless a name is new).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio

__all__ = ["NodeBook"]

WRITE_SECONDS = 60.0


class NodeBook:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._nodes: dict[str, dict[str, Any]] = {}
        self._written = 0.0
        self._lock = anyio.Lock()

    def load(self) -> None:
        """Read the file (blocking; at start).  A damaged file is ignored: this is only a memory."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            self._nodes = {
                str(k): {"name": str(v.get("name", ""))[:200], "last_seen": float(v.get("last_seen", 0))}
                for k, v in data.items()
                if isinstance(v, dict) and isinstance(v.get("last_seen", 0), int | float)
            }

    def name_of(self, node_id: str) -> str:
        return str(self._nodes.get(node_id, {}).get("name", ""))

    def last_seen(self, node_id: str) -> float | None:
        seen = self._nodes.get(node_id, {}).get("last_seen")
        return float(seen) if seen else None

    async def saw(self, sightings: dict[str, str]) -> None:
        """Record that these nodes (id -> name) are connected now."""
        now = time.time()
        renamed = False
        for node_id, name in sightings.items():
            entry = self._nodes.setdefault(node_id, {"name": "", "last_seen": 0.0})
            if name and entry["name"] != name:
                entry["name"] = name
                renamed = True
            entry["last_seen"] = now
        if renamed or now - self._written >= WRITE_SECONDS:
            self._written = now
            snapshot = json.dumps(self._nodes)
            async with self._lock:
                await anyio.to_thread.run_sync(_write, self.path, snapshot)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
