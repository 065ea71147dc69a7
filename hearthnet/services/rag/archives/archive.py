"""An archive: an external ChromaDB collection served as a read-only corpus.

The collections are made by another system (the seeds' document platform):
named ``repo_<uuid>``, cosine space, segments in four ``layer``s with the
metadata ``document_id, layer, page_number, section_heading, chunk_index,
char_start, char_end, token_count, text_preview, ...``.  The archive only
reads them.

A query searches the archive's layer (``chunk`` by default) unless the
caller's filter names ``layer`` itself; the caller's filter speaks HearthNet's
names (``page``), mapped to the archive's (``page_number``).  A vector whose
length is not the collection's dimension is refused before ChromaDB is asked.
Hits carry the mapped metadata (``page_number`` -> ``page``; ``text_preview``
dropped, the text is the full segment) and ``score = 1 - cosine distance``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx
import numpy as np
import structlog

from hearthnet.config.archives import ArchiveConfig
from hearthnet.errors import BadRequest, BusError, NotFound, Partition, Timeout
from hearthnet.services.rag.archives.client import ChromaHttpClient, CollectionRef, QueryResult
from hearthnet.services.rag.results import Hit, Vector
from hearthnet.services.rag.search.filters import build_where, chroma_where, compile_where

__all__ = [
    "DROPPED_METADATA",
    "MAX_LISTED",
    "MAX_RECHECKED",
    "MAX_SCANNED",
    "RENAMED_METADATA",
    "SEGMENT_METADATA",
    "Archive",
    "ArchiveInfo",
    "DocumentEntry",
    "archive_clause",
    "map_metadata",
    "score_of",
]

log = structlog.get_logger("hearthnet.rag.archives")

T = TypeVar("T")

RENAMED_METADATA: Mapping[str, str] = {"page_number": "page"}
"""The archive's metadata key -> HearthNet's (what ``rag.query`` answers and filters name)."""
DROPPED_METADATA = frozenset({"text_preview"})
"""Keys never passed on: ``text_preview`` repeats the start of the text (which a hit carries whole)."""
MAX_RECHECKED = 2048
"""Most entries one query asks ChromaDB for when the exact filter check drops some."""
MAX_LISTED = 1000
"""Most documents one ``list_documents`` call returns."""
MAX_SCANNED = 10_000
"""A collection without a ``document`` layer is listed by scanning its metadata: up to this many entries."""
_SCAN_PAGE = 1000
SEGMENT_METADATA = frozenset(
    {"layer", "page_number", "section_heading", "chunk_index", "char_start", "char_end", "token_count"}
)
"""Keys that describe one segment, not its document (left out of a document's metadata)."""
_FILTER_NAMES = {v: k for k, v in RENAMED_METADATA.items()}
"""HearthNet's key in a filter -> the archive's."""


@dataclass(frozen=True)
class ArchiveInfo:
    """What ``rag.list_corpora`` shows of an archive; ``None`` where the collection cannot tell."""

    name: str
    embedding_model: str
    dim: int | None
    """Vector dimension (``None``: an empty collection has none yet)."""
    chunks: int
    """Vectors held (every segment of every layer)."""
    docs: int | None = None
    read_only: bool = True
    label: str | None = None
    """A human name ("AIS Management Standard"); the corpus name is the identifier."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Facts safe to show: collection, server, layer, space."""


@dataclass(frozen=True)
class DocumentEntry:
    """One document of an archive as ``rag.list_documents`` shows it."""

    doc_id: str
    title: str | None = None
    chunks: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def map_metadata(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The archive's metadata as HearthNet answers it: renamed keys, scalars only, no preview."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in DROPPED_METADATA or not isinstance(value, str | int | float | bool):
            continue
        if key in _FILTER_NAMES and _FILTER_NAMES[key] in raw:
            continue  # the archive's own field wins over a same-named one (``page`` vs ``page_number``)
        out[RENAMED_METADATA.get(key, key)] = value
    return out


def _rename(clause: Mapping[str, Any]) -> dict[str, Any]:
    """A :func:`build_where` clause with HearthNet's keys replaced by the archive's."""
    if "$and" in clause or "$or" in clause:
        ((op, subs),) = clause.items()
        return {op: [_rename(c) for c in subs]}
    ((key, cond),) = clause.items()
    return {_FILTER_NAMES.get(key, key): dict(cond)}


def _names_key(clause: Mapping[str, Any], key: str) -> bool:
    if "$and" in clause or "$or" in clause:
        return any(_names_key(c, key) for subs in clause.values() for c in subs)
    return key in clause


def archive_clause(where: Mapping[str, Any] | None, layer: str) -> dict[str, Any]:
    """The clause an archive searches with: ``layer`` and the caller's ``where`` (in the archive's
    keys) together, or the caller's alone if it names ``layer`` (then it chooses the layers)."""
    own: dict[str, Any] = {"layer": {"$eq": layer}}
    if not where:
        return own
    theirs = _rename(where)
    if _names_key(theirs, "layer"):
        return theirs
    rest = theirs["$and"] if set(theirs) == {"$and"} else [theirs]
    return {"$and": [own, *rest]}


def score_of(distance: float, space: str) -> float:
    """Similarity from ChromaDB's distance: ``1 - d`` for cosine (and ``ip``, ``1 - dot``);
    for ``l2`` (squared) ``1 - d / 2``, the cosine of unit vectors."""
    return 1.0 - distance / 2.0 if space == "l2" else 1.0 - distance


class Archive:
    """One configured archive; safe to share between concurrent queries."""

    read_only = True

    def __init__(
        self,
        config: ArchiveConfig,
        *,
        timeout: float,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self._client = ChromaHttpClient(config.chromadb_url, timeout=timeout, http=http)
        self._ref: CollectionRef | None = None
        self._resolving = anyio.Lock()
        self.online: bool | None = None
        """``None`` until the server was asked; ``False`` after it could not be reached."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def embedding_model(self) -> str:
        return self.config.embedding_model

    async def aclose(self) -> None:
        await self._client.aclose()

    # what serve.py asks ---------------------------------------------------------------------
    async def query(
        self,
        vector: Vector,
        *,
        k: int,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
    ) -> list[Hit]:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_RECHECKED:
            raise BadRequest(f"k must be an integer 1-{MAX_RECHECKED}")
        vec = np.asarray(vector, dtype=np.float64).reshape(-1)
        if vec.size == 0 or not np.isfinite(vec).all():
            raise BadRequest(f"archive {self.config.display_name}: the query vector must be finite numbers")
        ref = await self._checked(vec.size)
        # build_where again: its output is a valid input, and a raw filter becomes canonical
        clause = archive_clause(build_where(where) if where else None, self.config.layer)
        try:
            return await self._search(ref, vec, k, clause, include_text)
        except NotFound:
            # The collection went away since it was resolved (deleted, or recreated with a new id):
            # look it up once more; if it is gone for good that says so.
            self._ref = None
            ref = await self._checked(vec.size)
            return await self._search(ref, vec, k, clause, include_text)

    async def info(self) -> ArchiveInfo:
        """The collection as it is now: count, dimension, documents (its ``document`` layer)."""
        ref = await self._resolve(fresh=True)
        count = await self._call(self._client.count(ref))
        docs = await self._call(
            self._client.get(ref, where={"layer": {"$eq": "document"}}, limit=MAX_SCANNED + 1, metadata=False)
        )
        return ArchiveInfo(
            name=self.name,
            embedding_model=self.embedding_model,
            dim=ref.dimension,
            chunks=count,
            docs=len(docs.ids) if 0 < len(docs.ids) <= MAX_SCANNED else None,
            read_only=True,
            label=self.config.display_name,
            details={
                "collection_name": self.config.collection_name,
                "chromadb_url": self.config.chromadb_url,
                "layer": self.config.layer,
                "space": ref.space,
            },
        )

    async def list_documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentEntry]:
        """The documents of the archive, from its ``document`` layer (one entry per document, as the
        platform writes it); a collection without that layer is scanned for distinct
        ``document_id`` values, up to ``MAX_SCANNED`` entries (``bad_request`` beyond)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
            raise BadRequest(f"limit must be 1-{MAX_LISTED}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise BadRequest("offset must be 0 or more")
        ref = await self._resolve()
        layer = {"layer": {"$eq": "document"}}
        probe = await self._call(self._client.get(ref, where=layer, limit=1, metadata=False))
        if probe.ids:
            got = await self._call(self._client.get(ref, where=layer, limit=limit, offset=offset))
            return [
                _document_entry(i, _document_level(m), None)
                for i, m in zip(got.ids, got.metadatas, strict=True)
            ]
        return (await self._scan_documents(ref))[offset : offset + limit]

    # internals ------------------------------------------------------------------------------
    async def _scan_documents(self, ref: CollectionRef) -> list[DocumentEntry]:
        """Distinct ``document_id`` values of a collection without a ``document`` layer, sorted;
        ``chunks`` counts each one's ``chunk``-layer entries (all its entries if none has a layer)."""
        count = await self._call(self._client.count(ref))
        if count > MAX_SCANNED:
            raise BadRequest(
                f"archive {self.config.display_name}: collection {self.config.collection_name} has no "
                f"'document' layer and {count} entries; documents are listed from that layer, "
                f"or by scanning at most {MAX_SCANNED} entries"
            )
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        chunks: dict[str, int] = {}
        for offset in range(0, count, _SCAN_PAGE):
            page = await self._call(self._client.get(ref, where=None, limit=_SCAN_PAGE, offset=offset))
            for entry_id, raw in zip(page.ids, page.metadatas, strict=True):
                doc_id = raw.get("document_id")
                if not isinstance(doc_id, str) or not doc_id:
                    continue  # an entry that names no document belongs to none
                found.setdefault(doc_id, (entry_id, raw))
                if raw.get("layer") in (None, "chunk"):
                    chunks[doc_id] = chunks.get(doc_id, 0) + 1
            if len(page.ids) < _SCAN_PAGE:
                break
        return [
            _document_entry(found[d][0], _document_level(found[d][1]), chunks.get(d, 0))
            for d in sorted(found)
        ]

    async def _checked(self, size: int) -> CollectionRef:
        """The collection, if ``size`` is its dimension; asked again once if not (it may have been
        recreated), then ``bad_request`` with both numbers. No query is sent before this."""
        ref = await self._resolve()
        if ref.dimension is not None and ref.dimension != size:
            ref = await self._resolve(fresh=True)
        if ref.dimension is not None and ref.dimension != size:
            raise BadRequest(
                f"archive {self.config.display_name}: the query vector has {size} dimensions but collection "
                f"{self.config.collection_name} holds {ref.dimension}-dimensional vectors; its queries "
                f"must be embedded with the model it was made with (configured: {self.embedding_model})"
            )
        return ref

    async def _resolve(self, *, fresh: bool = False) -> CollectionRef:
        async with self._resolving:
            if self._ref is None or fresh:
                self._ref = await self._call(self._client.get_collection(self.config.collection_name))
            return self._ref

    async def _search(
        self, ref: CollectionRef, vec: np.ndarray, k: int, clause: Mapping[str, Any], include_text: bool
    ) -> list[Hit]:
        """ChromaDB's nearest entries under a clause it can evaluate (:func:`chroma_where`), kept only
        if they match the clause exactly; too few left: ask for more, up to ``MAX_RECHECKED``."""
        started = time.perf_counter()
        sent = chroma_where(clause)
        matches = compile_where(clause)
        n = k
        while True:
            res = await self._call(
                self._client.query(ref, vec.tolist(), n_results=n, where=sent, include_text=include_text)
            )
            hits = [h for h in _hits(res, ref.space, include_text) if matches(h[1])]
            if len(hits) >= k or len(res.ids) < n or n >= MAX_RECHECKED:
                break
            n = min(n * 4, MAX_RECHECKED)
        out = [Hit(chunk_id=i, text=t, metadata=map_metadata(m), score=s) for i, m, t, s in hits[:k]]
        log.debug(
            "archive_query",
            corpus=self.name,
            collection=self.config.collection_name,
            k=k,
            hits=len(out),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return out

    async def _call(self, request: Awaitable[T]) -> T:
        """Await one ChromaDB request; errors name the archive, reachability is recorded."""
        try:
            result = await request
        except Partition as exc:
            if self.online is not False:
                log.warning(
                    "archive_offline",
                    corpus=self.name,
                    collection=self.config.collection_name,
                    error=exc.code,
                )
            self.online = False
            raise Partition(f"archive {self.config.display_name}: {exc.message}") from exc
        except Timeout as exc:  # slow, not gone: reachability stays as it was
            raise Timeout(f"archive {self.config.display_name}: {exc.message}") from exc
        except BusError as exc:
            self.online = True  # it answered
            raise type(exc)(f"archive {self.config.display_name}: {exc.message}") from exc
        if self.online is False:
            log.info("archive_online", corpus=self.name, collection=self.config.collection_name)
        self.online = True
        return result


def _hits(
    res: QueryResult, space: str, include_text: bool
) -> list[tuple[str, dict[str, Any], str | None, float]]:
    return [
        (i, m, t if include_text else None, score_of(d, space))
        for i, m, t, d in zip(res.ids, res.metadatas, res.documents, res.distances, strict=True)
    ]


def _document_level(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in SEGMENT_METADATA}


def _document_entry(entry_id: str, raw: Mapping[str, Any], chunks: int | None) -> DocumentEntry:
    doc_id = raw.get("document_id")
    title = next(
        (raw[k] for k in ("title", "document_title", "filename") if isinstance(raw.get(k), str)), None
    )
    return DocumentEntry(
        doc_id=doc_id if isinstance(doc_id, str) and doc_id else entry_id,
        title=title,
        chunks=chunks,
        metadata=map_metadata(raw),
    )
