"""``search_archives``: the seeds' agent tool over archives, with their ``rag_config`` contract.

A call names its archives in ``rag_config {archives: [{name, collection_name,
chromadb_url, embedding_model}]}``.  A call's ``rag_config`` *replaces* any
default set (no deep merge); absent (with no default) or empty, the tool is not
offered.  ``top_k`` is clamped to 1..20.  The answer is the seeds' German text
(``[1] Archiv: … (Ebene: chunk, Seite: 3, Abschnitt: …)``, passages separated
by ``---``) or JSON.

Where an archive is searched: a node of the mesh that serves it (same server
and collection, same model) answers it through ``rag.query`` over the bus;
otherwise this node asks the ChromaDB server itself, embedding the query
through ``embed.text`` — but only if the server is in its allow-list
(``rag.archive_urls`` and the configured archives' servers).  No request ever
goes to an address a caller made up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import numpy as np
import numpy.typing as npt
import structlog

from hearthnet.bus.api import BusAPI, ProviderInfo
from hearthnet.config.archives import (
    MAX_LABEL,
    MAX_TOP_K,
    ArchiveConfig,
    ArchiveDefaults,
    check_collection_name,
    check_server_url,
    normalize_url,
)
from hearthnet.errors import BadRequest, BusError, NotFound, Partition
from hearthnet.services.rag.archives.archive import Archive, map_metadata
from hearthnet.services.rag.archives.embed import embed_query
from hearthnet.services.rag.archives.merge import ArchiveHit, Ranked, merge_hits
from hearthnet.services.rag.results import Hit

__all__ = [
    "FAILED",
    "MAX_ARCHIVES",
    "MAX_QUERY_CHARS",
    "NO_ARCHIVES",
    "NO_RESULTS",
    "SEPARATOR",
    "SYSTEM_PROMPT",
    "TOOL_NAME",
    "ArchiveOutcome",
    "ArchiveRef",
    "ArchiveSearch",
    "SearchOutcome",
    "clamp_top_k",
    "effective_archives",
    "format_json",
    "format_passages",
    "format_text",
    "parse_rag_config",
    "serves",
    "tool_schema",
]

log = structlog.get_logger("hearthnet.rag.archives")

TOOL_NAME = "search_archives"
NO_RESULTS = "Keine relevanten Dokumente gefunden."
NO_ARCHIVES = "Keine Archive verfügbar."
FAILED = "Archivsuche fehlgeschlagen"
SEPARATOR = "\n\n---\n\n"
SYSTEM_PROMPT = (
    'Du hast Zugriff auf Dokumentenarchive. Verwende das Tool "search_archives",\n'
    "wenn der Benutzer Fragen zu Dokumenten, Berichten, Richtlinien oder archivierten\n"
    "Informationen stellt. Formuliere die Suchanfrage so um, dass sie für eine\n"
    "semantische Suche geeignet ist."
)
"""What the seed appends to the agent's system prompt when archives are configured."""
MAX_ARCHIVES = 16
"""Archives one call may name."""
MAX_QUERY_CHARS = 8192
"""``embed.text``'s input limit."""
ARCHIVES_AT_ONCE = 4
"""Archives searched concurrently by one call."""
MAX_CACHED_ARCHIVES = 64
"""Archives this node keeps resolved (collection id and dimension) between calls."""


# --------------------------------------------------------------------------- rag_config


@dataclass(frozen=True)
class ArchiveRef:
    """One entry of ``rag_config.archives``."""

    name: str
    """The human name ("AIS Management Standard"), shown in the answer."""
    collection_name: str
    chromadb_url: str
    embedding_model: str

    @property
    def server(self) -> str:
        return normalize_url(self.chromadb_url)


def _text_field(entry: Mapping[str, Any], key: str, where: str, limit: int) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > limit or not value.isprintable():
        raise BadRequest(f"{where}.{key} must be a string of 1-{limit} printable characters")
    return value


def parse_rag_config(raw: Any, defaults: ArchiveDefaults) -> list[ArchiveRef]:
    """``rag_config`` -> its archives; left-out ``chromadb_url`` / ``embedding_model`` take
    ``defaults`` (``DOCPROC_CHROMADB_URL``, then the seed's default).  Keys the contract does
    not name are ignored, as the seed's models ignore them."""
    if not isinstance(raw, Mapping):
        raise BadRequest("rag_config must be an object {archives: [...]}")
    archives = raw.get("archives")
    if archives is None:
        return []
    if not isinstance(archives, list | tuple):
        raise BadRequest("rag_config.archives must be a list")
    if len(archives) > MAX_ARCHIVES:
        raise BadRequest(f"rag_config.archives names {len(archives)} archives; at most {MAX_ARCHIVES}")
    out = []
    for i, entry in enumerate(archives):
        where = f"rag_config.archives[{i}]"
        if not isinstance(entry, Mapping):
            raise BadRequest(f"{where} must be an object")
        url = entry.get("chromadb_url")
        model = entry.get("embedding_model")
        out.append(
            ArchiveRef(
                name=_text_field(entry, "name", where, MAX_LABEL),
                collection_name=check_collection_name(
                    entry.get("collection_name"), f"{where}.collection_name"
                ),
                chromadb_url=defaults.chromadb_url
                if url is None
                else check_server_url(url, f"{where}.chromadb_url"),
                embedding_model=defaults.embedding_model
                if model is None
                else _text_field(entry, "embedding_model", where, 256),
            )
        )
    return out


def effective_archives(
    call: Mapping[str, Any] | None, default: Any, defaults: ArchiveDefaults
) -> list[ArchiveRef]:
    """The archives a call searches: its own ``rag_config`` if it has the key (it replaces the
    default wholly, even when empty or ``null``), else ``default``'s.  Empty: offer no tool."""
    raw = call["rag_config"] if call is not None and "rag_config" in call else default
    if not raw:
        return []
    return parse_rag_config(raw, defaults)


def clamp_top_k(value: Any, default: int) -> int:
    """``top_k`` as the seed takes it: a whole number (``"5"`` and ``5.0`` too), clamped to 1..20."""
    if value is None:
        return max(1, min(default, MAX_TOP_K))
    if isinstance(value, bool):
        raise BadRequest("top_k must be a number")
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        value = int(value.strip())
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise BadRequest("top_k must be a whole number")
    return max(1, min(value, MAX_TOP_K))


def tool_schema(default_top_k: int) -> dict[str, Any]:
    """The tool as an OpenAI-style function definition (what an LLM is offered)."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": (
                "Search the user's document archives for relevant content. Use this tool when the user "
                "asks about documents, policies, reports, maintenance records, or any information that "
                "might be in their archives."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Search query: rephrase the user's question for semantic search.",
                    },
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TOP_K,
                        "default": default_top_k,
                        "description": f"Number of results per archive (default {default_top_k}, max 20).",
                    },
                },
                "required": ["query"],
            },
        },
    }


# --------------------------------------------------------------------------- formatting


def _one_line(value: Any) -> str:
    """A header field on one line: line breaks become spaces (a heading holding one must not make
    its rest look like the passage), everything else as the seed writes it."""
    return " ".join(str(value).splitlines())


def format_passages(hits: Sequence[ArchiveHit]) -> str:
    """The seed's text: ``[n] Archiv: <name> (Ebene: …, Seite: …, Abschnitt: …)`` then the text;
    passages separated by ``---``; a field left out when empty (as the seed's ``if value``)."""
    if not hits:
        return NO_RESULTS
    parts = []
    for idx, result in enumerate(hits, 1):
        metadata = result.hit.metadata
        page = metadata.get("page", metadata.get("page_number"))
        source_info = []
        if metadata.get("layer"):
            source_info.append(f"Ebene: {_one_line(metadata['layer'])}")
        if page:
            source_info.append(f"Seite: {_one_line(page)}")
        if metadata.get("section_heading"):
            source_info.append(f"Abschnitt: {_one_line(metadata['section_heading'])}")
        header = f"[{idx}] Archiv: {_one_line(result.archive)}"
        if source_info:
            header += f" ({', '.join(source_info)})"
        parts.append(f"{header}\n{result.hit.text or ''}")
    return SEPARATOR.join(parts)


@dataclass(frozen=True)
class ArchiveOutcome:
    """How one archive of a call fared."""

    archive: ArchiveRef
    status: str
    """``ok``; ``unavailable`` (server or collection not reachable, or not allowed from here: the
    seeds skip such an archive); ``failed`` (embedding or search broke)."""
    hits: list[ArchiveHit] = field(default_factory=list)
    route: str = ""
    """``mesh`` (a node serving it answered over the bus), ``direct`` or ``""`` (not searched)."""
    error: BusError | None = None


@dataclass(frozen=True)
class SearchOutcome:
    results: list[Ranked]
    merge: str
    archives: list[ArchiveOutcome]

    @property
    def status(self) -> str:
        """``ok``, ``no_results``, ``no_archives`` (none could be searched) or ``failed``."""
        if self.results:
            return "ok"
        if any(a.status == "ok" for a in self.archives):
            return "no_results"
        if all(a.status == "unavailable" for a in self.archives):
            return "no_archives"
        return "failed"


def format_text(outcome: SearchOutcome) -> str:
    status = outcome.status
    if status == "ok":
        return format_passages([r.hit for r in outcome.results])
    return {"no_results": NO_RESULTS, "no_archives": NO_ARCHIVES}.get(status, FAILED)


def format_json(outcome: SearchOutcome) -> str:
    """The same answer as JSON: the ranked passages and how each archive fared."""
    status = outcome.status
    doc: dict[str, Any] = {
        "status": status,
        "message": format_text(outcome) if status != "ok" else "",
        "merge": outcome.merge,
        "results": [
            {
                "rank": rank,
                "archive": r.hit.archive,
                "collection_name": r.hit.collection_name,
                "chunk_id": r.hit.hit.chunk_id,
                "score": round(r.hit.hit.score, 6),
                "fused": round(r.fused, 6),
                "text": r.hit.hit.text or "",
                "metadata": dict(r.hit.hit.metadata),
            }
            for rank, r in enumerate(outcome.results, 1)
        ],
        "archives": [
            {
                "name": a.archive.name,
                "collection_name": a.archive.collection_name,
                "status": a.status,
                "route": a.route,
                "hits": len(a.hits),
                **({"error": a.error.to_wire()} if a.error is not None else {}),
            }
            for a in outcome.archives
        ],
    }
    return json.dumps(doc, ensure_ascii=False)


# --------------------------------------------------------------------------- search


def serves(params: Mapping[str, Any], ref: ArchiveRef) -> bool:
    """Whether a ``rag.query`` descriptor's params are this archive: same server, collection, model."""
    url, collection, model = (
        params.get("chromadb_url"),
        params.get("collection_name"),
        params.get("embedding_model"),
    )
    if not (isinstance(url, str) and isinstance(collection, str) and isinstance(params.get("corpus"), str)):
        return False
    try:
        same_server = normalize_url(url) == ref.server
    except ValueError:
        return False
    return same_server and collection == ref.collection_name and model == ref.embedding_model


class _NotAllowed(BadRequest):
    """This node may not ask the archive's server (not in its allow-list)."""


class ArchiveSearch:
    """Runs ``search_archives`` calls for one node (shares one HTTP client and resolved archives)."""

    def __init__(
        self,
        bus: BusAPI,
        *,
        allowed_urls: Iterable[str],
        layer: str,
        query_timeout: float,
        embed_timeout: float,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._bus = bus
        self._allowed = frozenset(normalize_url(u) for u in allowed_urls)
        self._layer = layer
        self._query_timeout = query_timeout
        self._embed_timeout = embed_timeout
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(follow_redirects=False)
        self._archives: dict[tuple[str, str, str], Archive] = {}
        self._limiter = anyio.CapacityLimiter(ARCHIVES_AT_ONCE)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def allowed(self, url: str) -> bool:
        return normalize_url(url) in self._allowed

    async def search(self, query: str, archives: Sequence[ArchiveRef], *, top_k: int) -> SearchOutcome:
        """Every archive searched for ``top_k`` hits (concurrently), then merged and cut to ``top_k``."""
        if not isinstance(query, str) or not query.strip():
            raise BadRequest("query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS:
            raise BadRequest(f"query is {len(query)} characters long; at most {MAX_QUERY_CHARS}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise BadRequest(f"top_k must be 1-{MAX_TOP_K}")
        k = top_k
        vectors: dict[str, _Embedding] = {}
        outcomes: list[ArchiveOutcome | None] = [None] * len(archives)

        async def one(i: int, ref: ArchiveRef) -> None:
            async with self._limiter:
                outcomes[i] = await self._one(i, ref, query, k, vectors)

        async with anyio.create_task_group() as tg:
            for i, ref in enumerate(archives):
                tg.start_soon(one, i, ref)
        done = [o for o in outcomes if o is not None]
        ranked, how = merge_hits([h for o in done for h in o.hits])
        return SearchOutcome(results=ranked[:k], merge=how, archives=done)

    async def run(
        self,
        arguments: Mapping[str, Any],
        archives: Sequence[ArchiveRef],
        *,
        default_top_k: int,
        as_json: bool,
    ) -> str:
        """One tool call: ``arguments`` as the LLM gave them (``{query, top_k?}``) -> the tool's answer."""
        if not archives:
            outcome = SearchOutcome(results=[], merge="score", archives=[])
            return format_json(outcome) if as_json else NO_ARCHIVES
        query = arguments.get("query")
        if not isinstance(query, str):
            raise BadRequest("query must be a non-empty string")
        top_k = clamp_top_k(arguments.get("top_k"), default_top_k)
        outcome = await self.search(query, archives, top_k=top_k)
        return format_json(outcome) if as_json else format_text(outcome)

    async def _one(
        self, source: int, ref: ArchiveRef, query: str, k: int, vectors: dict[str, _Embedding]
    ) -> ArchiveOutcome:
        providers = self._serving(ref)
        route = "mesh" if providers else "direct"
        stage = "search"
        try:
            if providers:
                hits = await self._over_bus(ref, query, k, providers)
            elif not self.allowed(ref.chromadb_url):
                raise _NotAllowed(
                    f"archive {ref.name}: {ref.chromadb_url} is served by no node of the mesh and is not "
                    "in this node's rag.archive_urls; add it there to let this node query it"
                )
            else:
                stage = "embed"
                vector = await self._embedding(ref.embedding_model, query, vectors)
                stage = "search"
                hits = await self._archive(ref).query(vector, k=k)
        except BusError as exc:
            unavailable = isinstance(exc, _NotAllowed) or (
                stage == "search" and isinstance(exc, Partition | NotFound)
            )
            log.warning(
                "archive_search_failed",
                collection=ref.collection_name,
                route=route,
                stage=stage,
                error=exc.code,
            )
            return ArchiveOutcome(
                ref,
                "unavailable" if unavailable else "failed",
                route="" if isinstance(exc, _NotAllowed) else route,
                error=exc,
            )
        found = [
            ArchiveHit(ref.name, ref.collection_name, ref.server, ref.embedding_model, hit, rank, source)
            for rank, hit in enumerate(hits, 1)
        ]
        return ArchiveOutcome(ref, "ok", found, route=route)

    def _serving(self, ref: ArchiveRef) -> list[ProviderInfo]:
        """Nodes offering ``rag.query`` for this archive, searching this node's default layer if any do.

        The registry answers one descriptor per remote node for the params asked, so the params
        name the archive (collection and model; the layer first); the server is compared
        normalised afterwards, as nodes may spell its URL differently.
        """
        wanted = {"collection_name": ref.collection_name, "embedding_model": ref.embedding_model}
        for params in ({**wanted, "layer": self._layer}, wanted):
            found = [
                p
                for p in self._bus.providers("rag.query", (1, 0), params)
                if serves(p.descriptor.params, ref)
            ]
            if found:
                return found
        return []

    async def _over_bus(
        self, ref: ArchiveRef, query: str, k: int, providers: Sequence[ProviderInfo]
    ) -> list[Hit]:
        """``rag.query`` at a node serving the archive (one searching this node's default layer
        first, then this node's own); the params name the archive exactly, so the bus may fail over
        only to nodes serving the same one."""
        best = min(providers, key=lambda p: (p.descriptor.params.get("layer") != self._layer, not p.is_local))
        chosen = best.descriptor.params
        params = {
            key: chosen[key] for key in ("corpus", "chromadb_url", "collection_name", "embedding_model")
        }
        result = await self._bus.call(
            "rag.query",
            (1, 0),
            params=params,
            input={"query": query, "k": k, "include_text": True},
            timeout=self._query_timeout + self._embed_timeout,
        )
        chunks = result.output.get("chunks")
        if not isinstance(chunks, list):
            raise BadRequest(f"archive {ref.name}: rag.query answered without a chunk list")
        hits = []
        for item in chunks[:k]:
            if not isinstance(item, Mapping):
                continue
            meta = item.get("metadata")
            meta = dict(meta) if isinstance(meta, Mapping) else {}
            chunk_id = meta.pop("chunk_id", None)
            score, text = item.get("score"), item.get("text")
            if not isinstance(chunk_id, str) or not (text is None or isinstance(text, str)):
                continue  # a malformed entry from a peer is dropped, not passed on
            if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
                continue
            hits.append(Hit(chunk_id=chunk_id, text=text, metadata=map_metadata(meta), score=float(score)))
        return hits

    async def _embedding(
        self, model: str, query: str, vectors: dict[str, _Embedding]
    ) -> npt.NDArray[np.float32]:
        """The query embedded with ``model``, once per call however many archives use it."""
        entry = vectors.get(model)
        if entry is None:
            entry = vectors[model] = _Embedding()
            try:
                entry.vector = await embed_query(self._bus, model, query, timeout=self._embed_timeout)
            except BusError as exc:
                entry.error = exc
            finally:
                entry.ready.set()
        await entry.ready.wait()
        if entry.error is not None:
            raise entry.error
        assert entry.vector is not None
        return entry.vector

    def _archive(self, ref: ArchiveRef) -> Archive:
        key = (ref.server, ref.collection_name, ref.embedding_model)
        archive = self._archives.get(key)
        if archive is None:
            if len(self._archives) >= MAX_CACHED_ARCHIVES:
                self._archives.pop(next(iter(self._archives)))
            config = ArchiveConfig(
                name="archive",
                collection_name=ref.collection_name,
                chromadb_url=ref.chromadb_url,
                embedding_model=ref.embedding_model,
                layer=self._layer,
                label=ref.name,
            )
            archive = self._archives[key] = Archive(config, timeout=self._query_timeout, http=self._http)
        return archive


@dataclass
class _Embedding:
    ready: anyio.Event = field(default_factory=anyio.Event)
    vector: npt.NDArray[np.float32] | None = None
    error: BusError | None = None
