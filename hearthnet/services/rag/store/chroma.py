"""ChromaDB as the store uses it: one collection per corpus (cosine space, our HNSW settings),
embedded on disk or a server by URL, its failures converted to bus errors at this boundary."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog

from hearthnet.contracts.rag import is_corpus_name, validate_corpus_name
from hearthnet.errors import BadRequest, InternalError, NotFound, Partition, Timeout
from hearthnet.services.rag.store.ledger import SCHEMA_VERSION, Ledger

__all__ = [
    "COLLECTION_PREFIX",
    "COLLECTION_SUFFIX",
    "HNSW_PARAMS",
    "SERVER_TIMEOUT_SECONDS",
    "CollectionGone",
    "Collections",
    "chroma_errors",
    "close_client",
    "collection_name",
    "collection_settings",
    "corpus_from_collection",
    "open_client",
    "staging_collection_name",
]

_log = structlog.get_logger("hearthnet.rag.store")

HNSW_PARAMS: Mapping[str, Any] = {"ef_construction": 200, "ef_search": 256, "max_neighbors": 32}
"""Chosen from ``bench/rag_recall.py`` measurements (``specs/rag.md``, "Store")."""
SERVER_TIMEOUT_SECONDS = 60.0
"""Longest wait for one ChromaDB server request (the client's own default is no limit)."""

# ChromaDB requires collection names of 3-512 characters from ``[a-zA-Z0-9._-]`` that start and
# end alphanumeric.  ``"hn-" + name + "-v1"`` is always valid for a valid corpus name: it is at
# least 7 characters long, starts with ``h`` and ends with ``1``, and a leading or trailing ``-``
# in the corpus name lands in the middle.
COLLECTION_PREFIX = "hn-"
COLLECTION_SUFFIX = "-v1"


def collection_name(corpus: str) -> str:
    """The ChromaDB collection that holds ``corpus`` (validated first)."""
    return f"{COLLECTION_PREFIX}{validate_corpus_name(corpus)}{COLLECTION_SUFFIX}"


def staging_collection_name(corpus: str) -> str:
    """Where a reindex writes the rebuilt ``corpus`` before it replaces the collection.

    ``collection_name(corpus) + ".rebuild"``: valid for ChromaDB (ends alphanumeric) and never
    taken for a corpus's own collection by :func:`corpus_from_collection`.
    """
    return f"{collection_name(corpus)}.rebuild"


def corpus_from_collection(collection: str) -> str | None:
    """The corpus held by ``collection``, or None if it is not one of ours."""
    if not (collection.startswith(COLLECTION_PREFIX) and collection.endswith(COLLECTION_SUFFIX)):
        return None
    name = collection[len(COLLECTION_PREFIX) : -len(COLLECTION_SUFFIX)]
    if not is_corpus_name(name):
        return None
    return name


def collection_settings(
    name: str, *, embedding_model: str, dim: int, created: float, hnsw: Mapping[str, Any]
) -> dict[str, Any]:
    """How a corpus's collection is made (a new corpus, or its rebuild by a reindex)."""
    return {
        "configuration": {"hnsw": {"space": "cosine", **hnsw}},
        "metadata": {
            "hn_corpus": name,
            "embedding_model": embedding_model,
            "dim": dim,
            "schema_version": SCHEMA_VERSION,
            "created_at": created,
        },
    }


class CollectionGone(NotFound):
    """A cached collection handle whose collection no longer exists (reindexed, deleted, or the
    server lost it): the store drops the handle, so the next use looks the collection up again."""


@dataclass(kw_only=True, eq=False)
class Collections:
    """The collection of each corpus: opened on first use and held (under the store's ``lock``,
    an ``RLock``: a caller holding it may ask too).

    Given what it uses of the store: its ``ledger`` (which corpora exist, a swap owed), the
    ChromaDB ``client`` (``remote``: a server), ``finish_swap`` (a reindex's swap left halfway)
    and ``drop`` (a corpus whose collection is gone, forgotten; called under the lock).
    """

    lock: threading.RLock
    ledger: Ledger
    client: Any
    remote: bool
    finish_swap: Callable[[str], None]
    drop: Callable[[str], None]
    _held: dict[str, Any] = field(default_factory=dict, init=False)

    def open(self, name: str) -> Any:
        """The corpus's collection, or ``NotFound`` if it is gone.

        Embedded, only an interrupted reindex removes a collection, and the
        corpus is dropped.  On a ChromaDB server a collection can also vanish
        because the node was pointed at another server or the server lost its
        data: then the corpus and its document list are kept, so that the right
        server URL brings it back or ``hearthnet rag reindex`` rebuilds it from
        its source documents.
        """
        from chromadb.errors import NotFoundError

        validate_corpus_name(name)
        with self.lock:
            col = self._held.get(name)
            if col is not None:
                return col
            if self.ledger.corpus(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
        # Looked up without the lock (on a server this is a network call, and the event loop
        # reads the ledger under the same lock); a miss is decided under it, after any swap.
        with chroma_errors("open collection"), contextlib.suppress(NotFoundError):
            col = self.client.get_collection(collection_name(name), embedding_function=None)
        with self.lock:
            if self.ledger.corpus(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            cached = self._held.get(name)
            if cached is not None:
                return cached
            with chroma_errors("open collection"):
                try:
                    if col is None and self.ledger.swap_owed(name):
                        self.finish_swap(name)  # a reindex's swap failed halfway: finish it now
                    if col is None:
                        col = self.client.get_collection(collection_name(name), embedding_function=None)
                except NotFoundError as exc:
                    _log.warning("rag_corpus_collection_missing", corpus=name, kept=self.remote)
                    if self.remote:
                        raise NotFound(
                            f"corpus {name!r}: its vector collection is not on the ChromaDB server (another "
                            "server, or the server lost its data); its document list is kept: point the node "
                            f"at the right server, or run 'hearthnet rag reindex --corpus {name}' to rebuild "
                            "it from its source documents"
                        ) from exc
                    self.drop(name)
                    raise NotFound(
                        f"corpus {name!r} does not exist: its vector collection is gone (e.g. a reindex "
                        "was interrupted), so it was dropped; ingest its documents again"
                    ) from exc
            self._held[name] = col
            return col

    def get(self, name: str) -> Any | None:
        """The handle held for ``name``, or ``None`` (no lookup)."""
        with self.lock:
            return self._held.get(name)

    def known(self, name: str) -> bool:
        """Whether the collection of ``name`` is held (no lookup)."""
        with self.lock:
            return name in self._held

    def hold(self, name: str, collection: Any) -> None:
        with self.lock:
            self._held[name] = collection

    def forget(self, name: str) -> None:
        """Let go of the handle: the next :meth:`open` looks the collection up again."""
        with self.lock:
            self._held.pop(name, None)

    def clear(self) -> None:
        with self.lock:
            self._held.clear()


@contextlib.contextmanager
def chroma_errors(what: str) -> Iterator[None]:
    """Convert ChromaDB / transport failures at the boundary."""
    import httpx
    from chromadb.errors import ChromaError, NotFoundError

    try:
        yield
    except NotFoundError as exc:
        raise CollectionGone(
            f"the vector collection went away while trying to {what} (reindexed or deleted "
            "meanwhile): ask again"
        ) from exc
    except ChromaError as exc:
        raise InternalError(f"vector store failed to {what}: {type(exc).__name__}") from exc
    except httpx.TimeoutException as exc:
        raise Timeout(
            f"vector store did not answer within {SERVER_TIMEOUT_SECONDS:.0f} s while trying to {what}"
        ) from exc
    except (ConnectionError, OSError, httpx.TransportError) as exc:
        raise Partition(f"vector store unreachable while trying to {what}: {type(exc).__name__}") from exc


def open_client(root: Path, server_url: str | None) -> Any:
    """ChromaDB embedded under ``root/chroma``, or the server at ``server_url`` (its requests bounded)."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if server_url is None:
        return chromadb.PersistentClient(path=str(root / "chroma"), settings=settings)
    url = urlsplit(server_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise BadRequest(f"ChromaDB server URL {server_url!r} must be http(s)://host:port")
    client = chromadb.HttpClient(
        host=url.hostname,
        port=url.port or (443 if url.scheme == "https" else 8000),
        ssl=url.scheme == "https",
        settings=settings,
    )
    _bound_server_requests(client)
    return client


def close_client(client: Any) -> None:
    """Let go of a ChromaDB client: the last one of a path or server stops its system (its SQLite
    files), and a server client's HTTP sessions are closed, its own and its admin client's
    (chromadb's ``close`` leaves them open, their connections to the garbage collector).  A
    failure to stop is logged: closing goes on."""
    try:
        client.close()
    except Exception as exc:  # a third party's teardown: never stops ours
        _log.warning("rag_chroma_close_failed", error=type(exc).__name__)
    for part in (client, getattr(client, "_admin_client", None)):
        session = _server_session(part)
        if session is not None:
            session.close()


def _server_session(client: Any) -> Any:
    """The ``httpx.Client`` a ChromaDB server client sends its requests with, or ``None``."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    return session if isinstance(session, httpx.Client) else None


def _bound_server_requests(client: Any) -> None:
    """Give the ChromaDB server client's HTTP session a finite timeout (it has none by default,
    so a stalled server would hold a store thread forever)."""
    import httpx

    session = _server_session(client)
    if session is not None:
        session.timeout = httpx.Timeout(SERVER_TIMEOUT_SECONDS, connect=10.0)
    else:  # another chromadb layout: keep going, but say that requests are unbounded
        _log.warning("rag_chroma_server_timeout_not_set", reason="no httpx session found on the client")
