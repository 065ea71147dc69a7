"""The ``rag.*`` contract: corpus names and the rules of the two reserved ones, the limits of the
capabilities' inputs, the events a host announces, how callers choose a host, and
:class:`RagClient`, the typed client the composer and the front doors ask corpora through.

A corpus name is ``[a-z0-9-]+``, at most 64 characters.  ``personal`` and ``system`` are
reserved: valid names, but ``personal`` is never reachable from another node, never announced
and its documents are private blobs, and ``system`` is read-only (:func:`check_reachable`,
:func:`check_writable`, :func:`announced`, :func:`is_private`).

``rag.query`` ``params {corpus}``, ``input {query, k = 5 (max 20), filter?, include_text = true,
mode = hybrid (dense | keyword | hybrid)}`` -> ``output {chunks: [{rank, score, similarity, text,
metadata {doc_cid, doc_title, page, chunk_id, ...}}]}`` (``similarity``: the cosine; ``score``:
what the mode ranks by; ``input.embedding``, a vector already made with the corpus's model,
stands for the query's embedding, and alone answers dense);
``rag.get`` ``params {corpus}``, ``input {ids?, filter?, contains?, limit = 100 (max 1000), offset = 0,
include_text = true, include_embeddings = false}`` -> ``output {chunks: [{chunk_id, metadata, text?,
embedding?}]}`` (complete documents' chunks in the store's order: the ChromaDB door's ``get``);
``rag.ingest`` (trusted) ``params {corpus}``, ``input {doc_cid, title?, language?, filename?,
metadata?}``, or ``input {documents: [such inputs]}`` (up to ``MAX_INGEST_BATCH``, each document
atomic and answered on its own; an e-mail's answer lists its attachments, each ingested as a
document of its own: ``attachments: [{filename, doc_cid, ok, ...}]``); ``rag.list_documents``
pages ``{after, limit}``; ``rag.delete`` (trusted) ``{doc_cid}``; ``rag.update`` (trusted)
``{doc_cid, metadata?, title?}`` (a document's metadata and title changed on its host without
re-embedding: ``metadata`` sets each field given, ``null`` removes one); ``rag.list_corpora``, and
``rag.known_corpora`` (this node only: every corpus the community knows of and its hosts).
See ``specs/rag.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals
from hearthnet.bus.router import Preference
from hearthnet.contracts.base import Caller, Streamed, given, opened, streamed_result, streamer
from hearthnet.errors import BadRequest, NotFound, Unauthorized

__all__ = [
    "BEHIND",
    "BY_CORPUS",
    "CORPUS_NAME",
    "CORPUS_PATTERN",
    "DEFAULT_K",
    "DEFAULT_MODE",
    "DELETE",
    "DELETED",
    "EXPORT",
    "GET",
    "GET_PAGE",
    "INGEST",
    "INGESTED",
    "KEPT_LOCAL",
    "KNOWN_CORPORA",
    "LANGUAGE",
    "LIST_CORPORA",
    "LIST_DOCUMENTS",
    "LIST_PAGE",
    "LOW_TEXT",
    "MAX_CONTAINS",
    "MAX_CORPUS_NAME",
    "MAX_FILENAME",
    "MAX_GET_CHUNKS",
    "MAX_INGEST_BATCH",
    "MAX_K",
    "MAX_LIST_PAGE",
    "MAX_QUERY_CHARS",
    "MAX_TITLE",
    "MOVE",
    "MOVED",
    "PERSONAL",
    "PREDICATES",
    "PREFERENCES",
    "QUERY",
    "QUERY_MODES",
    "REINDEX",
    "REPLICATE",
    "REPLICA_OF",
    "RESERVED",
    "SEARCH_ARCHIVES",
    "SYSTEM",
    "UPDATE",
    "UPDATED",
    "OnFrame",
    "RagClient",
    "advertised_chunks",
    "announced",
    "check_reachable",
    "check_replicable",
    "check_writable",
    "embedded_with_another",
    "host_label",
    "ingest_input",
    "ingest_predicate",
    "ingest_timeout",
    "is_corpus_name",
    "is_language",
    "is_private",
    "query_rank",
    "validate_corpus_name",
]

# -- capability names ----------------------------------------------------------------------------
QUERY = "rag.query"
INGEST = "rag.ingest"
DELETE = "rag.delete"
UPDATE = "rag.update"
LIST_DOCUMENTS = "rag.list_documents"
LIST_CORPORA = "rag.list_corpora"
KNOWN_CORPORA = "rag.known_corpora"
REINDEX = "rag.reindex"
SEARCH_ARCHIVES = "rag.search_archives"
GET = "rag.get"


# -- corpus names --------------------------------------------------------------------------------
MAX_CORPUS_NAME = 64
RESERVED: frozenset[str] = frozenset({"personal", "system"})
PERSONAL = "personal"
SYSTEM = "system"
CORPUS_PATTERN = "[a-z0-9-]{1,64}"
CORPUS_NAME = re.compile(CORPUS_PATTERN)
"""The corpus-name pattern, written once: every check of a name (the CLI's, the doors', the
services', an archive's) uses it or :func:`validate_corpus_name`."""


def is_corpus_name(value: object) -> bool:
    """Whether ``value`` is a valid corpus name (reserved ones included)."""
    return isinstance(value, str) and CORPUS_NAME.fullmatch(value) is not None


def validate_corpus_name(name: object, *, allow_reserved: bool = True) -> str:
    """Return ``name`` if it is a valid corpus name, else raise :class:`BadRequest`."""
    if not isinstance(name, str):
        raise BadRequest(f"corpus name must be a string, got {type(name).__name__}")
    if not name:
        raise BadRequest("corpus name is empty: use 1-64 characters of a-z, 0-9 and '-'")
    if len(name) > MAX_CORPUS_NAME:
        raise BadRequest(f"corpus name is {len(name)} characters long: at most {MAX_CORPUS_NAME} allowed")
    if CORPUS_NAME.fullmatch(name) is None:
        raise BadRequest(f"corpus name {name!r} is invalid: use only lowercase a-z, digits 0-9 and '-'")
    if not allow_reserved and name in RESERVED:
        raise BadRequest(f"corpus name {name!r} is reserved")
    return name


# -- the reserved corpora ----------------------------------------------------------------------
KEPT_LOCAL: tuple[tuple[str, dict[str, str]], ...] = (
    (QUERY, {"corpus": PERSONAL}),
    (GET, {"corpus": PERSONAL}),
    (INGEST, {"corpus": PERSONAL}),
)
"""Calls every node keeps to itself, whether or not it runs RAG (``CapabilityBus.keep_local``)."""


def check_reachable(corpus: str, *, is_local: bool) -> None:
    """``not_found`` for the personal corpus asked by another node: it is never reachable from one."""
    if corpus == PERSONAL and not is_local:
        raise NotFound("corpus personal is never reachable from another node")


def check_writable(corpus: str, *, is_local: bool, what: str) -> None:
    """``bad_request`` for the read-only ``system``; ``unauthorized`` for ``personal`` written by
    another node (``what``: "documents", "deletions")."""
    if corpus == SYSTEM:
        raise BadRequest("corpus system is read-only")
    if corpus == PERSONAL and not is_local:
        raise Unauthorized(f"corpus personal only takes {what} from this node itself")


def announced(corpus: str) -> bool:
    """Whether the corpus's documents are announced to the community (signed events, named in
    the host's advertised params and health): every corpus but ``personal``."""
    return corpus != PERSONAL


def is_private(corpus: str) -> bool:
    """Whether a document ingested into ``corpus`` is a private blob, never given to a peer."""
    return corpus == PERSONAL


def embedded_with_another(corpus: str, has: str, wants: str, *, then: str = "") -> NotFound:
    """The refusal of a corpus embedded with model ``has`` by a node that embeds with ``wants``:
    queries and new documents would be compared in different vector spaces.  ``then`` ends the
    advice (" first": before an ingest)."""
    return NotFound(
        f"corpus {corpus} was embedded with {has} but this node embeds with {wants}: "
        f"run 'hearthnet rag reindex --corpus {corpus}'{then}"
    )


# -- limits ------------------------------------------------------------------------------------
DEFAULT_K = 5
QUERY_MODES = ("dense", "keyword", "hybrid")
"""How ``rag.query`` ranks: by cosine (``dense``), by BM25 (``keyword``), or by both fused."""
DEFAULT_MODE = "hybrid"
"""Measured better than ``dense`` on SciFact (``specs/rag.md``, "Query modes")."""
MAX_K = 20
"""``rag.query``'s largest ``k`` (advertised as its ``k_max``)."""
INGEST_FLOOR_SECONDS = 900.0
"""The least one document's ``rag.ingest`` is given (a small file on an idle node takes seconds)."""
INGEST_SECONDS_PER_MB = 1200.0
"""A document's ``rag.ingest`` deadline per megabyte of file: generous for a busy small device
(a 3.4 MB, 249-page book took ~20 minutes at half a core of a loaded box, specs/benchmarks.md)."""


def ingest_timeout(size_bytes: int) -> float:
    """Seconds a caller gives ``rag.ingest`` of a file of ``size_bytes``: from the work (its size),
    never less than ``INGEST_FLOOR_SECONDS`` (a constant failed every large book on a slow node)."""
    return max(INGEST_FLOOR_SECONDS, INGEST_SECONDS_PER_MB * max(0, size_bytes) / 1_000_000)


MAX_QUERY_CHARS = 8192
MAX_TITLE = 1000
"""Longest document title, in ``rag.ingest``'s input, in chunks and in the ingest event."""
MAX_FILENAME = 255
"""Longest file name ``rag.ingest`` keeps (the common file-system limit, in characters)."""
MAX_INGEST_BATCH = 64
"""Most documents in one ``rag.ingest {documents}`` call."""
GET_PAGE = 100
MAX_GET_CHUNKS = 1000
"""Chunks per ``rag.get`` page: by default, and at most (also the most ``ids`` one call names)."""
MAX_CONTAINS = 256
"""Longest ``rag.get`` ``contains`` text."""
LIST_PAGE = 200
MAX_LIST_PAGE = 1000
"""Documents per ``rag.list_documents`` page: by default, and at most."""
LANGUAGE = re.compile(r"[A-Za-z0-9_-]{1,16}")
"""A language tag as chunks and ingest events carry it ('en', 'pt-BR', 'und'): letters,
digits, '-' and '_', 1..16 of them, so nothing shown to a member can steer a terminal."""


def is_language(value: object) -> bool:
    return isinstance(value, str) and LANGUAGE.fullmatch(value) is not None


# -- events a host announces ----------------------------------------------------------------------
INGESTED = "rag.document.ingested"
"""``{corpus, doc_cid, title, language, chunks}``: a host indexed a document (rules: :mod:`.rag_events`)."""
DELETED = "rag.document.deleted"
"""``{corpus, doc_cid}``: a host took a document out of a corpus."""
UPDATED = "rag.document.updated"
"""``{corpus, doc_cid, title, metadata, digest?}``: a host changed a document's title and metadata (the
whole of its caller metadata after the change; ``digest``: of the document as stored after it)."""
MOVED = "rag.corpus.moved"
"""``{corpus, from, to}``: an anchor handed a corpus's host role to an up-to-date replica."""
EXPORT = "rag.export"
"""``rag.export@1.0`` (trusted, streamed) ``params {corpus}``, ``input {doc_cid}``: a document's chunks,
metadata and vectors, from any node holding them (``specs/replicas.md``)."""
REPLICATE = "rag.replicate"
"""``rag.replicate@1.0`` (this node only) ``input {corpus, replicate: bool}``: hold a replica of the
corpus, or give it up; ``input {}`` lists this node's replicas."""
MOVE = "rag.move"
"""``rag.move@1.0`` (this node only, an anchor's) ``input {corpus, to}``: make the up-to-date replica
``to`` the corpus's host (a signed ``rag.corpus.moved``)."""
LOW_TEXT = "low_text"
"""In a chunk's metadata (``true``, or absent): its page carries almost no text (a cover, a notice, a
table of contents); ``rag.query`` ranks it below content, an extractive answer quotes it last."""
REPLICA_OF = "replica_of"
"""In a replica's ``rag.query`` params: the node id of the corpus's host it follows."""
BEHIND = "behind"
"""In a replica's ``rag.query`` params: the documents it knows of and has not applied yet."""


def check_replicable(corpus: object) -> str:
    """``corpus`` if another node may hold a replica of it; ``bad_request`` with the reason otherwise."""
    name = validate_corpus_name(corpus)
    if name == PERSONAL:
        raise BadRequest(
            "corpus personal never replicates: its documents never leave the node that holds them"
        )
    if name == SYSTEM:
        raise BadRequest("corpus system is reserved and read-only: there is nothing to replicate")
    return name


# -- which provider fits ------------------------------------------------------------------------
BY_CORPUS: ParamsPredicate = params_key_equals("corpus")
"""``rag.query``, ``rag.get``, ``rag.list_documents``, ``rag.delete``: the provider holds the named corpus."""


def ingest_predicate(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """``rag.ingest``: the provider hosts the corpus, or accepts new corpora."""
    corpus = requested.get("corpus")
    if corpus is None:
        return True
    hosted = offered.get("corpora") or []
    return (isinstance(hosted, list) and corpus in hosted) or bool(offered.get("accepts_new"))


def advertised_chunks(offered: Mapping[str, Any]) -> int:
    """A corpus host's rank: the chunks it advertises (0 if it says nothing: an older node), so
    two hosts of one corpus name never send callers to the smaller copy."""
    chunks = offered.get("chunks")
    return chunks if type(chunks) is int and chunks > 0 else 0


def query_rank(offered: Mapping[str, Any]) -> int:
    """A ``rag.query`` provider's rank: the host and every replica that has applied all it knows of
    rank by their chunks (:func:`advertised_chunks`); a replica that is behind ranks below all of them
    (the less behind, the higher), so it answers only when nothing fresher is online."""
    behind = offered.get(BEHIND)
    if offered.get(REPLICA_OF) and type(behind) is int and behind > 0:
        return -behind
    return advertised_chunks(offered)


PREDICATES: Mapping[str, ParamsPredicate] = {INGEST: ingest_predicate}
"""How a remote provider's params are matched, where it is not every requested key equal."""
PREFERENCES: Mapping[str, Preference] = {
    QUERY: query_rank,
    LIST_DOCUMENTS: query_rank,
    GET: query_rank,
}
"""Among the providers that fit, which to try first (a higher rank first)."""


def host_label(node_id: str, name: str | None = None) -> str:
    """A node as messages name it: ``name (node id)``, or the id alone when no name is known.

    The name is the peer's own word (from its manifest): cut to 64 characters, and any that
    could steer a terminal replaced by '?'.
    """
    if not name:
        return node_id
    clean = "".join(ch if ch.isprintable() else "?" for ch in name[:64])
    return f"{clean} ({node_id})"


# -- the typed client ---------------------------------------------------------------------------
OnFrame = Callable[[dict[str, Any]], None]
"""What a streamed call's progress frames (``{stage, current, total}``) are handed to."""


def ingest_input(
    doc_cid: str,
    *,
    filename: str | None = None,
    title: str | None = None,
    language: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One document of ``rag.ingest``'s input (alone, or one of its ``documents``)."""
    # no title: the document's own, or its file name
    return {
        "doc_cid": doc_cid,
        **given(
            filename=filename,
            title=title,
            language=language,
            metadata=dict(metadata) if metadata else None,
        ),
    }


class RagClient:
    """The ``rag.*`` capabilities as a caller uses them (through the node's bus, its control socket
    or one web login): every field of each capability's input, and nothing else, reaches it."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def query(
        self,
        corpus: str,
        query: str,
        *,
        k: int = DEFAULT_K,
        filter: Mapping[str, Any] | None = None,
        include_text: bool = True,
        mode: str | None = None,
        embedding_model: str | None = None,
        timeout: float | None = None,
        provider: str | None = None,
        embedding: list[float] | None = None,
    ) -> CallResult:
        """``rag.query`` of ``corpus``: its ``k`` chunks best for ``query`` (``mode``: one of
        :data:`QUERY_MODES`, the corpus host's default if ``None``; ``embedding_model``: only a
        host whose copy is embedded with that model).  ``embedding``: the query's vector, already
        made with the corpus's model (then ``query`` may be empty: dense only)."""
        inp: dict[str, Any] = {"k": k}
        if query:
            inp["query"] = query
        if embedding is not None:
            inp["embedding"] = embedding
        if filter:
            inp["filter"] = dict(filter)
        if not include_text:
            inp["include_text"] = False
        if mode is not None:
            inp["mode"] = mode
        params = {"corpus": corpus}
        if embedding_model is not None:
            params["embedding_model"] = embedding_model
        return await self._caller.call(QUERY, params=params, input=inp, timeout=timeout, provider=provider)

    def ingesting(
        self,
        corpus: str,
        documents: Sequence[Mapping[str, Any]],
        *,
        provider: str | None = None,
        timeout: float | None = None,
    ) -> AbstractAsyncContextManager[Streamed]:
        """``rag.ingest`` streamed: one document (a list of one: its input is sent alone, as older
        hosts take it) or a batch ``{documents}`` (each made by :func:`ingest_input`)."""
        inp = dict(documents[0]) if len(documents) == 1 else {"documents": [dict(d) for d in documents]}
        return opened(
            streamer(self._caller),
            INGEST,
            params={"corpus": corpus},
            input=inp,
            provider=provider,
            timeout=timeout,
        )

    async def get(
        self,
        corpus: str,
        *,
        ids: list[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        contains: str | None = None,
        limit: int = GET_PAGE,
        offset: int = 0,
        include_text: bool = True,
        include_embeddings: bool = False,
        timeout: float | None = None,
    ) -> list[dict[str, Any]]:
        """``rag.get``: chunks of ``corpus`` by id, filter or text, in the store's order, paged."""
        inp: dict[str, Any] = {"limit": limit, "offset": offset, "include_text": include_text}
        if ids:
            inp["ids"] = ids
        if filter:
            inp["filter"] = dict(filter)
        if contains:
            inp["contains"] = contains
        if include_embeddings:
            inp["include_embeddings"] = True
        result = await self._caller.call(GET, params={"corpus": corpus}, input=inp, timeout=timeout)
        return list(result.output.get("chunks") or [])

    async def ingest(
        self,
        corpus: str,
        documents: Sequence[Mapping[str, Any]],
        *,
        provider: str | None = None,
        timeout: float | None = None,
        on_frame: OnFrame | None = None,
    ) -> CallResult:
        """:meth:`ingesting` run to its end, each progress frame handed to ``on_frame``."""
        return await streamed_result(
            self.ingesting(corpus, documents, provider=provider, timeout=timeout), on_frame
        )

    async def delete(
        self, corpus: str, doc_cid: str, *, provider: str | None = None, timeout: float | None = None
    ) -> CallResult:
        """``rag.delete``: the document out of ``corpus`` (on ``provider``, else where it is hosted)."""
        return await self._caller.call(
            DELETE, params={"corpus": corpus}, input={"doc_cid": doc_cid}, provider=provider, timeout=timeout
        )

    async def update(
        self,
        corpus: str,
        document: str,
        *,
        meta: Mapping[str, Any] | None = None,
        title: str | None = None,
        filename: str | None = None,
        provider: str | None = None,
        timeout: float | None = None,
    ) -> CallResult:
        """``rag.update``: the document ``document`` (its doc_cid) of ``corpus`` gets ``title``, the
        file name ``filename`` and each field of ``meta`` (a ``None`` value removes the field),
        without re-embedding, on its host."""
        inp = {
            "doc_cid": document,
            **given(metadata=dict(meta) if meta else None, title=title, filename=filename),
        }
        return await self._caller.call(
            UPDATE, params={"corpus": corpus}, input=inp, provider=provider, timeout=timeout
        )

    async def list_documents(
        self,
        corpus: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        provider: str | None = None,
        timeout: float | None = None,
    ) -> CallResult:
        """``rag.list_documents``: one page of ``corpus``'s documents, after the doc_cid ``after``."""
        inp = given(after=after or None, limit=limit)
        return await self._caller.call(
            LIST_DOCUMENTS, params={"corpus": corpus}, input=inp, provider=provider, timeout=timeout
        )

    async def reindex(
        self, corpus: str, *, timeout: float | None = None, on_frame: OnFrame | None = None
    ) -> CallResult:
        """``rag.reindex``: re-embed this node's ``corpus`` with its configured model."""
        call = opened(streamer(self._caller), REINDEX, input={"corpus": corpus}, timeout=timeout)
        return await streamed_result(call, on_frame)

    async def search_archives(
        self,
        query: str,
        *,
        format: str | None = None,
        top_k: int | None = None,
        rag_config: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> CallResult:
        """``rag.search_archives``: the archives the node's allow-list names, searched at once."""
        inp = {"query": query, **given(format=format, top_k=top_k, rag_config=rag_config)}
        return await self._caller.call(SEARCH_ARCHIVES, input=inp, timeout=timeout)

    async def known_corpora(
        self, corpus: str | None = None, *, provider: str | None = None, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """``rag.known_corpora``: every corpus the community knows of (or just ``corpus``) with its hosts;
        ``not_found`` from a node without the catalog."""
        result = await self._caller.call(
            KNOWN_CORPORA,
            input={} if corpus is None else {"corpus": corpus},
            provider=provider,
            timeout=timeout,
        )
        return list(result.output.get("corpora") or [])

    async def hosts_of(self, corpus: str) -> list[dict[str, Any]]:
        """The hosts of ``corpus`` that ``rag.known_corpora`` knows of, preferred first; those online
        and no longer serving it are left out.  Empty if none, or if the node cannot tell."""
        try:
            known = await self.known_corpora(corpus)
        except NotFound:
            return []  # a node without the catalog (an older version)
        return [h for c in known for h in c.get("hosts", []) if h.get("hosting")]

    async def replicate(
        self, corpus: str, *, replicate: bool = True, timeout: float | None = None
    ) -> dict[str, Any]:
        """``rag.replicate``: hold a replica of ``corpus`` on this node (or give it up)."""
        result = await self._caller.call(
            REPLICATE, input={"corpus": corpus, "replicate": replicate}, timeout=timeout
        )
        return result.output

    async def replicas(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The corpora this node holds replicas of, with their host and lag."""
        result = await self._caller.call(REPLICATE, input={}, timeout=timeout)
        return list(result.output.get("replicas") or [])

    async def move(self, corpus: str, to: str, *, timeout: float | None = None) -> dict[str, Any]:
        """``rag.move``: hand ``corpus``'s host role to the up-to-date replica ``to``."""
        result = await self._caller.call(MOVE, input={"corpus": corpus, "to": to}, timeout=timeout)
        return result.output

    async def list_corpora(self, provider: str, *, timeout: float) -> list[dict[str, Any]]:
        """``rag.list_corpora`` of one node: its corpora with their counts and models."""
        result = await self._caller.call(LIST_CORPORA, provider=provider, timeout=timeout)
        return list(result.output.get("corpora") or [])
