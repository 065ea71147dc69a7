"""Which corpora this node holds a replica of: ``[[rag.replicas]]`` in its config, changed by its owner
with ``hearthnet corpus replicate`` / ``unreplicate`` (kept in ``replicas.json`` beside the store, so a
restart keeps them), and who may copy a corpus this node hosts (``rag.max_replicas``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from hearthnet.contracts.rag import check_replicable, host_label
from hearthnet.errors import CapacityExceeded

__all__ = ["ReplicaCap", "ReplicaPolicy"]


class ReplicaPolicy:
    """The corpora to replicate: the configured ones and those added since, less those given up."""

    def __init__(self, configured: Sequence[str], path: Path) -> None:
        self._configured = tuple(check_replicable(c) for c in configured)
        self._path = path
        self._lock = threading.Lock()
        self._added: set[str] = set()
        self._dropped: set[str] = set()
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            return  # unreadable: the configured corpora stand, the file is written anew on change
        if isinstance(data, dict):
            self._added = {c for c in data.get("added", []) if isinstance(c, str)}
            self._dropped = {c for c in data.get("dropped", []) if isinstance(c, str)}

    def _save(self) -> None:
        """Written to a temporary file, then renamed: a kill leaves the old list or the new one."""
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"added": sorted(self._added), "dropped": sorted(self._dropped)}))
        os.replace(tmp, self._path)

    def corpora(self) -> list[str]:
        with self._lock:
            return sorted((set(self._configured) | self._added) - self._dropped)

    def wants(self, corpus: str) -> bool:
        return corpus in self.corpora()

    def add(self, corpus: str) -> None:
        with self._lock:
            self._added.add(check_replicable(corpus))
            self._dropped.discard(corpus)
            self._save()

    def drop(self, corpus: str) -> None:
        with self._lock:
            self._added.discard(corpus)
            self._dropped.add(corpus)
            self._save()


class ReplicaCap:
    """The nodes that copy each corpus this host serves, capped at ``max_replicas`` (``None``: no cap).

    Remembered in ``replica_holders.json`` so a restart does not forget who holds a copy.  A node
    that gave its copy up stays counted (it can ask to come back; an owner who wants its place
    freed raises the cap).
    """

    def __init__(self, max_replicas: int | None, path: Path, node_id: str) -> None:
        self._max = max_replicas
        self._path = path
        self._node = node_id
        self._lock = threading.Lock()
        self._holders: dict[str, set[str]] = {}
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                self._holders = {
                    str(k): {n for n in v if isinstance(n, str)}
                    for k, v in raw.items()
                    if isinstance(v, list)
                }
        except (OSError, ValueError):
            pass

    @property
    def max_replicas(self) -> int | None:
        return self._max

    def admit(self, corpus: str, caller: str) -> None:
        """Let ``caller`` copy ``corpus``, or ``capacity_exceeded`` when it would be one too many."""
        if self._max is None:
            return
        with self._lock:
            holders = self._holders.setdefault(corpus, set())
            if caller in holders:
                return
            if len(holders) >= self._max:
                raise CapacityExceeded(
                    f"corpus {corpus}'s host {host_label(self._node)} allows at most {self._max} "
                    f"replicas (rag.max_replicas), held by {len(holders)} nodes already"
                )
            holders.add(caller)
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text(json.dumps({k: sorted(v) for k, v in self._holders.items()}))
            os.replace(tmp, self._path)
