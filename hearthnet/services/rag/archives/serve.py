"""The node's configured archives served as read-only corpora: ``rag.query`` and
``rag.list_documents`` per archive, their entries in ``rag.list_corpora``, and the refusal of
every write (``rag.ingest``, ``rag.delete``, ``rag.reindex`` into one is ``bad_request``).

One :class:`Archive` per ``[[rag.archives]]`` table, built when the RAG service is made.  A query
is embedded with the archive's model through ``embed.text`` (``params {model}``: whichever node
serves that model) and searched densely; this path is the archives' own, beside the store's
search, so the two never share handler code.  An archive whose name a store corpus of this node
already has is not served (the store's corpus keeps the name; logged ``archive_name_taken``).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, shared_keys_equal
from hearthnet.config.archives import ArchiveConfig
from hearthnet.contracts.rag import MAX_K, validate_corpus_name
from hearthnet.errors import BadRequest, BusError, NotFound, Timeout
from hearthnet.services.rag.archives.embed import embed_query
from hearthnet.services.rag.inputs import list_input, query_input
from hearthnet.services.rag.replies import query_reply

if TYPE_CHECKING:  # loaded with the first archive: a node without archives needs no HTTP client
    from hearthnet.services.rag.archives.archive import Archive

__all__ = ["ServedArchives", "archive_params"]

log = structlog.get_logger("hearthnet.rag.archives")

Output = tuple[dict[str, Any], dict[str, Any]]


def archive_params(config: ArchiveConfig) -> dict[str, Any]:
    """The params of an archive's ``rag.query``: what ``search_archives`` on any node matches an
    archive by (server, collection, model, layer)."""
    return {
        "corpus": config.name,
        "embedding_model": config.embedding_model,
        "k_max": MAX_K,
        "read_only": True,
        "chromadb_url": config.chromadb_url,
        "collection_name": config.collection_name,
        "layer": config.layer,
    }


class ServedArchives:
    """The archives one RAG service serves (only the event loop touches it)."""

    def __init__(
        self,
        *,
        bus: BusAPI,
        configs: Sequence[ArchiveConfig],
        query_timeout: float,
        embed_timeout: float,
    ) -> None:
        self._bus = bus
        self._configs = tuple(configs)
        self._query_timeout = query_timeout
        self._embed_timeout = embed_timeout
        self._served: dict[str, Archive] = {}
        self.queries = 0

    # what the service asks -------------------------------------------------------------------
    def registrations(self, held: Collection[str]) -> list[Registration]:
        """``rag.query`` and ``rag.delete`` (which refuses) of every archive whose name no store
        corpus of this node has (``held``); builds the archives (no request is sent yet)."""
        regs: list[Registration] = []
        if self._configs:
            from hearthnet.services.rag.archives.archive import Archive
        for config in self._configs:
            if config.name in held:
                log.warning("archive_name_taken", corpus=config.name, collection=config.collection_name)
                continue
            if config.name not in self._served:
                self._served[config.name] = Archive(config, timeout=self._query_timeout)
            regs.extend(self._of_archive(config))
        return regs

    def names(self) -> list[str]:
        return list(self._served)

    def refuse_write(self, corpus: str, what: str) -> None:
        """``bad_request`` if ``corpus`` is an archive: nothing is ever written to one."""
        archive = self._served.get(corpus)
        if archive is not None:
            config = archive.config
            raise BadRequest(
                f"corpus {corpus} is the archive {config.display_name} (ChromaDB collection "
                f"{config.collection_name} at {config.chromadb_url}), read-only: cannot {what} it; "
                "its documents are managed by the system that made the collection"
            )

    def health(self) -> dict[str, Any]:
        """Per archive: ``online`` (``None`` until asked), never its text."""
        return {name: {"online": a.online} for name, a in sorted(self._served.items())}

    async def aclose(self) -> None:
        for archive in self._served.values():
            await archive.aclose()

    async def list_entries(self) -> list[dict[str, Any]]:
        """``rag.list_corpora`` entries, the archives asked at once, each within the query timeout;
        an archive that cannot answer is listed with ``online: false`` and its error."""
        entries: dict[str, dict[str, Any]] = {}

        async def one(name: str, archive: Archive) -> None:
            entries[name] = await self._entry(archive)

        async with anyio.create_task_group() as tg:
            for name, archive in self._served.items():
                tg.start_soon(one, name, archive)
        return [entries[n] for n in sorted(entries)]

    # handlers ------------------------------------------------------------------------------
    async def handle_query(self, ctx: CallContext) -> Output:
        """``rag.query`` of an archive: the query embedded with the archive's model (``embed.text``,
        any node serving it), then the archive's nearest segments of its layer."""
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        archive = self._served.get(corpus)
        if archive is None:
            raise NotFound(f"corpus {corpus} is not an archive served by this node")
        q = query_input(ctx.input)
        k, where, include_text, mode = q.k, q.where, q.include_text, q.mode
        # an archive has no keyword index: it answers dense, and says so
        model = archive.embedding_model
        embedding = time.perf_counter()
        vector = (
            q.embedding
            if q.embedding is not None
            else await embed_query(self._bus, model, q.text, timeout=self._embed_timeout)
        )
        embedded = time.perf_counter()
        hits = await archive.query(vector, k=k, where=where, include_text=include_text)
        self.queries += 1
        out, meta = query_reply(
            ctx,
            hits,
            q,
            corpus=corpus,
            mode="dense",
            started=started,
            embed_seconds=embedded - embedding,
            model=model,
            archive=True,
        )
        meta.update(read_only=True, label=archive.config.display_name)
        if mode != "dense" and "mode" in ctx.input:  # asked for explicitly: say it was not given
            meta["mode_requested"] = mode
            meta["warnings"] = [
                f"corpus {corpus} is an archive without a keyword index: this {mode} query was "
                "answered by dense search alone"
            ]
        return out, meta

    async def handle_list_documents(self, ctx: CallContext) -> Output:
        """``rag.list_documents`` of an archive: its documents in ChromaDB's order (its ``document``
        layer), paged by position (``next`` is the position to continue from, as text)."""
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        archive = self._served.get(corpus)
        if archive is None:
            raise NotFound(f"corpus {corpus} is not an archive served by this node")
        after, limit = list_input(ctx.input)
        if after and not after.isdigit():
            raise BadRequest("input.after must be the 'next' value of the previous page of this archive")
        offset = int(after or 0)
        page = await archive.list_documents(limit=limit, offset=offset)
        more = len(page) == limit and bool(await archive.list_documents(limit=1, offset=offset + limit))
        info = await archive.info()
        total = info.docs if info.docs is not None else offset + len(page) + (1 if more else 0)
        documents = [
            {
                "doc_cid": d.doc_id,
                "title": d.title or d.doc_id,
                "filename": None,
                "pages": None,
                "chunks": d.chunks,
                "language": None,
                "ingested_by": None,
                "ingested_at": None,
                "metadata": dict(d.metadata),
            }
            for d in page
        ]
        return {"documents": documents, "total": total, "next": str(offset + limit) if more else None}, {
            "corpus": corpus,
            "read_only": True,
            "label": archive.config.display_name,
        }

    async def handle_delete(self, ctx: CallContext) -> Output:
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        self.refuse_write(corpus, "delete documents from")
        raise NotFound(f"corpus {corpus} is not an archive served by this node")

    # internals -------------------------------------------------------------------------------
    async def _entry(self, archive: Archive) -> dict[str, Any]:
        config = archive.config
        entry: dict[str, Any] = {
            "name": config.name,
            "docs": None,
            "chunks": None,
            "size_bytes": None,
            "language_majority": None,
            "embedding_model": config.embedding_model,
            "served": True,
            "read_only": True,
            "label": config.display_name,
            "dim": None,
            "online": archive.online,
            "collection_name": config.collection_name,
            "chromadb_url": config.chromadb_url,
            "layer": config.layer,
        }
        try:
            with anyio.fail_after(self._query_timeout):
                info = await archive.info()
        except TimeoutError:
            entry["error"] = Timeout(
                f"archive {config.display_name}: ChromaDB gave no answer within {self._query_timeout:g} s"
            ).to_wire()
        except BusError as exc:
            entry["error"] = exc.to_wire()
        else:
            entry.update(docs=info.docs, chunks=info.chunks, dim=info.dim)
        entry["online"] = archive.online
        return entry

    def _of_archive(self, config: ArchiveConfig) -> list[Registration]:
        params = archive_params(config)
        what = f"archive {config.display_name} (read-only)"
        return [
            Registration(
                CapabilityDescriptor(
                    "rag.query",
                    (1, 0),
                    params=params,
                    max_concurrent=8,
                    # the query is embedded (maybe on another node), then ChromaDB is asked
                    timeout_seconds=self._query_timeout + self._embed_timeout,
                    idempotent=True,
                    description=f"search {what}",
                ),
                self.handle_query,
                shared_keys_equal,
            ),
            Registration(
                CapabilityDescriptor(
                    "rag.list_documents",
                    (1, 0),
                    params={"corpus": config.name, "read_only": True},
                    max_concurrent=8,
                    timeout_seconds=4 * self._query_timeout,
                    idempotent=True,
                    description=f"documents of {what}",
                ),
                self.handle_list_documents,
                shared_keys_equal,
            ),
            Registration(
                CapabilityDescriptor(
                    "rag.delete",
                    (1, 0),
                    params={"corpus": config.name, "read_only": True},
                    max_concurrent=2,
                    timeout_seconds=10.0,
                    idempotent=True,
                    description=f"{what}: refuses deletes",
                ),
                self.handle_delete,
                shared_keys_equal,
            ),
        ]
