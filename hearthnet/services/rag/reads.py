"""``rag.get``: a corpus's stored chunks read back by id, filter or text, a page at a time (what
the ChromaDB door's ``get`` serves).  Only complete documents' chunks, as a query sees them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hearthnet.bus.context import CallContext
from hearthnet.contracts.rag import check_reachable, validate_corpus_name
from hearthnet.errors import NotFound
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.inputs import get_input
from hearthnet.services.rag.store import CorpusStore

__all__ = ["ChunkReads"]

Output = tuple[dict[str, Any], dict[str, Any]]


class ChunkReads:
    """The ``rag.get`` handler of a store's corpora (``held``: the params a corpus is registered
    with, ``None`` when this node does not serve it)."""

    def __init__(
        self,
        store: CorpusStore,
        threads: WorkerThreads,
        held: Callable[[str], dict[str, Any] | None],
    ) -> None:
        self._store = store
        self._threads = threads
        self._held = held

    async def handle_get(self, ctx: CallContext) -> Output:
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_reachable(corpus, is_local=ctx.is_local)
        got = get_input(ctx.input)
        registered = self._held(corpus)
        if registered is None:
            raise NotFound(f"corpus {corpus} is not held by this node")
        store = self._store

        def read() -> list[dict[str, Any]]:
            rows = store.get_chunks(
                corpus,
                ids=got.ids,
                where=got.where,
                contains=got.contains,
                limit=got.limit,
                offset=got.offset,
                include_text=got.include_text,
                include_embeddings=got.include_embeddings,
            )
            out = []
            for row in rows:
                item: dict[str, Any] = {
                    "chunk_id": row.chunk_id,
                    "metadata": {**row.metadata, "chunk_id": row.chunk_id},
                }
                if row.text is not None:
                    item["text"] = row.text
                if row.embedding is not None:
                    item["embedding"] = row.embedding
                out.append(item)
            return out

        chunks = await run_blocking(read, limiter=self._threads)
        meta = {"corpus": corpus, "embedding_model": registered.get("embedding_model")}
        return {"chunks": chunks}, meta
