"""What every part of :class:`~hearthnet.services.rag.store.store.CorpusStore` shares: the
store's lock, its ledger, the in-memory copies, the corpora's ChromaDB collections, the documents
this process is writing, and ChromaDB's write size.  One object, built once by the store and given
to each part beside what that part alone uses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hearthnet.services.rag.search.memory import InMemoryCopies
from hearthnet.services.rag.store.ledger import Ledger

__all__ = ["StoreCore"]


@dataclass(frozen=True, kw_only=True, eq=False)
class StoreCore:
    """The store's shared state, as its parts use it.  Blocking, thread-safe.

    ``root`` is the store's folder (the ledger's database file, a full disk's message); ``lock`` is
    held for every ledger read and every change of ``memory``; ``collection(name)`` is a corpus's
    ChromaDB collection (``NotFound`` if gone); ``writing(name)`` the documents this process is
    writing to a corpus (hidden from queries); ``batch`` ChromaDB's write size.
    """

    root: Path
    lock: threading.RLock
    ledger: Ledger
    memory: InMemoryCopies
    collection: Callable[[str], Any]
    writing: Callable[[str], set[str]]
    batch: int
