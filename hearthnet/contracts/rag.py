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
what the mode ranks by);
``rag.ingest`` (trusted) ``params {corpus}``, ``input {doc_cid, title?, language?, filename?,
metadata?}``, or ``input {documents: [such inputs]}`` (up to ``MAX_INGEST_BATCH``, each document
atomic and answered on its own); ``rag.list_documents`` pages ``{after, limit}``; ``rag.delete`` (trusted)
``{doc_cid}``; ``rag.list_corpora``, and ``rag.known_corpora`` (this node only: every corpus the
community knows of and its hosts).  See ``specs/rag.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals
from hearthnet.bus.router import Preference
from hearthnet.contracts.base import Caller
from hearthnet.errors import BadRequest, NotFound, Unauthorized

__all__ = [
    "BY_CORPUS",
    "DEFAULT_K",
    "DEFAULT_MODE",
    "DELETED",
    "INGESTED",
    "KEPT_LOCAL",
    "LANGUAGE",
    "LIST_PAGE",
    "MAX_CORPUS_NAME",
    "MAX_FILENAME",
    "MAX_INGEST_BATCH",
    "MAX_K",
    "MAX_LIST_PAGE",
    "MAX_QUERY_CHARS",
    "MAX_TITLE",
    "PERSONAL",
    "PREDICATES",
    "PREFERENCES",
    "QUERY_MODES",
    "RESERVED",
    "SYSTEM",
    "RagClient",
    "advertised_chunks",
    "announced",
    "check_reachable",
    "check_writable",
    "host_label",
    "ingest_predicate",
    "ingest_timeout",
    "is_language",
    "is_private",
    "validate_corpus_name",
]

# -- corpus names --------------------------------------------------------------------------------
MAX_CORPUS_NAME = 64
RESERVED: frozenset[str] = frozenset({"personal", "system"})
PERSONAL = "personal"
SYSTEM = "system"
_NAME = re.compile(r"[a-z0-9-]+")


def validate_corpus_name(name: object, *, allow_reserved: bool = True) -> str:
    """Return ``name`` if it is a valid corpus name, else raise :class:`BadRequest`."""
    if not isinstance(name, str):
        raise BadRequest(f"corpus name must be a string, got {type(name).__name__}")
    if not name:
        raise BadRequest("corpus name is empty: use 1-64 characters of a-z, 0-9 and '-'")
    if len(name) > MAX_CORPUS_NAME:
        raise BadRequest(f"corpus name is {len(name)} characters long: at most {MAX_CORPUS_NAME} allowed")
    if _NAME.fullmatch(name) is None:
        raise BadRequest(f"corpus name {name!r} is invalid: use only lowercase a-z, digits 0-9 and '-'")
    if not allow_reserved and name in RESERVED:
        raise BadRequest(f"corpus name {name!r} is reserved")
    return name


# -- the reserved corpora ----------------------------------------------------------------------
KEPT_LOCAL: tuple[tuple[str, dict[str, str]], ...] = (
    ("rag.query", {"corpus": PERSONAL}),
    ("rag.ingest", {"corpus": PERSONAL}),
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


# -- limits ------------------------------------------------------------------------------------
DEFAULT_K = 5
QUERY_MODES = ("dense", "keyword", "hybrid")
"""How ``rag.query`` ranks: by cosine (``dense``), by BM25 (``keyword``), or by both fused."""
DEFAULT_MODE = "hybrid"
"""Measured better than ``dense`` on SciFact (``specs/rag.md``, "Query modes")."""
MAX_K = 20
INGEST_FLOOR_SECONDS = 900.0
"""The least one document's ``rag.ingest`` is given (a small file on an idle node takes seconds)."""
INGEST_SECONDS_PER_MB = 1200.0
"""A document's ``rag.ingest`` deadline per megabyte of file: generous for a busy small device
(a 3.4 MB, 249-page book took ~20 minutes at half a core of a loaded box, specs/benchmarks.md)."""


def ingest_timeout(size_bytes: int) -> float:
    """Seconds a caller gives ``rag.ingest`` of a file of ``size_bytes``: from the work (its size),
    never less than ``INGEST_FLOOR_SECONDS`` (a constant failed every large book on a slow node)."""
    return max(INGEST_FLOOR_SECONDS, INGEST_SECONDS_PER_MB * max(0, size_bytes) / 1_000_000)


"""``rag.query``'s largest ``k`` (advertised as its ``k_max``)."""
MAX_QUERY_CHARS = 8192
MAX_TITLE = 1000
"""Longest document title, in ``rag.ingest``'s input, in chunks and in the ingest event."""
MAX_FILENAME = 255
"""Longest file name ``rag.ingest`` keeps (the common file-system limit, in characters)."""
MAX_INGEST_BATCH = 64
"""Most documents in one ``rag.ingest {documents}`` call."""
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


# -- which provider fits ------------------------------------------------------------------------
BY_CORPUS: ParamsPredicate = params_key_equals("corpus")
"""``rag.query``, ``rag.list_documents``, ``rag.delete``: the provider holds the named corpus."""


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


PREDICATES: Mapping[str, ParamsPredicate] = {"rag.ingest": ingest_predicate}
"""How a remote provider's params are matched, where it is not every requested key equal."""
PREFERENCES: Mapping[str, Preference] = {
    "rag.query": advertised_chunks,
    "rag.list_documents": advertised_chunks,
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
class RagClient:
    """The ``rag.*`` capabilities as a caller uses them (through the node's bus or its control socket)."""

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
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult:
        """``rag.query`` of ``corpus``: its ``k`` chunks best for ``query`` (``mode``: one of
        :data:`QUERY_MODES`, the corpus host's default if ``None``)."""
        inp: dict[str, Any] = {"query": query, "k": k}
        if filter:
            inp["filter"] = dict(filter)
        if not include_text:
            inp["include_text"] = False
        if mode is not None:
            inp["mode"] = mode
        return await self._caller.call(
            "rag.query", params={"corpus": corpus}, input=inp, timeout=timeout, provider=provider
        )

    async def known_corpora(
        self, corpus: str | None = None, *, provider: str | None = None, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """``rag.known_corpora``: every corpus the community knows of (or just ``corpus``) with its hosts;
        ``not_found`` from a node without the catalog."""
        result = await self._caller.call(
            "rag.known_corpora",
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

    async def list_corpora(self, provider: str, *, timeout: float) -> list[dict[str, Any]]:
        """``rag.list_corpora`` of one node: its corpora with their counts and models."""
        result = await self._caller.call("rag.list_corpora", provider=provider, timeout=timeout)
        return list(result.output.get("corpora") or [])
