"""The corpus swap of a reindex (a part :class:`~hearthnet.services.rag.store.store.CorpusStore`
composes): a corpus rebuilt beside the old one, then put in its place, all or nothing; and the
drop of a whole corpus."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.store.chroma import (
    chroma_errors,
    collection_name,
    collection_settings,
    staging_collection_name,
)
from hearthnet.services.rag.store.core import StoreCore
from hearthnet.services.rag.store.ledger import CorpusRecord
from hearthnet.services.rag.store.write import DocumentWrite, out_of_space

__all__ = ["CorpusSwap"]


@dataclass(kw_only=True, eq=False)
class CorpusSwap:
    """:meth:`replace_corpus`, :meth:`drop_corpus` and :meth:`finish` (a swap a crash left owed).

    Given what it uses of the store: its ``core``, the ChromaDB ``client`` and the ``hnsw``
    settings of a new collection, ``write_document`` (the store's write of one document's chunks
    into a collection), ``forget`` (the store's caches of a corpus dropped: handle, metadata keys,
    copy, writes in progress) and ``info``.  Blocking, thread-safe.
    """

    core: StoreCore
    client: Any
    hnsw: dict[str, Any]
    write_document: Callable[[Any, DocumentWrite], None]
    forget: Callable[[str], None]
    info: Callable[[str], CorpusRecord]

    def replace_corpus(
        self,
        name: str,
        *,
        embedding_model: str,
        dim: int,
        documents: Sequence[tuple[Sequence[Chunk], np.ndarray]],
    ) -> CorpusRecord:
        """Rebuild ``name`` from ``documents`` (a reindex, perhaps with another model), all or nothing.

        Creates the corpus if it does not exist (e.g. its collection was lost).

        The new collection is written beside the old one, which keeps answering
        queries meanwhile.  If anything fails while it is written (a full disk,
        a ChromaDB error, a bad document), it is dropped and the corpus stays as
        it was.  Then one ledger transaction records the new documents and
        model together with a swap marker, and the old collection is replaced by
        the new one; a crash before the marker leaves the old corpus, a crash
        after it is finished by :meth:`recover` at the next start.
        """
        from chromadb.errors import NotFoundError

        validate_corpus_name(name)
        if not embedding_model or dim <= 0:
            raise BadRequest("embedding_model must be non-empty and dim positive")
        writes = [DocumentWrite.of(chunks, vectors, dim) for chunks, vectors in documents]
        if len({w.doc_cid for w in writes}) != len(writes):
            raise BadRequest("a document is listed twice")
        staging = staging_collection_name(name)
        created = time.time()
        settings = collection_settings(
            name, embedding_model=embedding_model, dim=dim, created=created, hnsw=self.hnsw
        )
        with chroma_errors("create the rebuilt collection"):
            with contextlib.suppress(NotFoundError):
                self.client.delete_collection(staging)
            col = self.client.create_collection(staging, **settings, embedding_function=None)
        try:
            for w in writes:
                self.write_document(col, w)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.client.delete_collection(staging)
            if isinstance(exc, Exception):
                full = out_of_space(self.core.root, exc, needed=sum(w.size for w in writes))
                if full is not None:
                    raise full from exc
            raise
        with self.core.lock:
            self.core.ledger.replace(name, writes, embedding_model=embedding_model, dim=dim, created=created)
            self.forget(name)
            self.finish(name)
            # from memory: no query has to load the new copy from ChromaDB
            self.core.memory.rebuilt(
                name,
                dim,
                [i for w in writes for i in w.ids],
                [w.vectors for w in writes],
                [t for w in writes for t in w.texts],
                [m for w in writes for m in w.metadatas],
            )
        return self.info(name)

    def drop_corpus(self, name: str) -> bool:
        """Remove ``name`` wholly: its ledger rows (one transaction: from then on it does not exist),
        then its collection (a leftover collection is dropped by the next :meth:`drop_corpus` or
        replaced by a new one).  ``False`` if it did not exist.  A replica given up does this."""
        from chromadb.errors import NotFoundError

        validate_corpus_name(name)
        with self.core.lock:
            if self.core.ledger.corpus(name) is None:
                return False
            if self.core.writing(name):
                raise BadRequest(f"corpus {name!r} is being written; drop it when that is done")
            self.core.ledger.forget_corpus(name)
            self.forget(name)
        with chroma_errors("drop a corpus"), contextlib.suppress(NotFoundError):
            self.client.delete_collection(collection_name(name))
        return True

    def finish(self, name: str) -> None:
        """Put the rebuilt collection of ``name`` in place of the old one (caller holds the lock)."""
        from chromadb.errors import NotFoundError

        with chroma_errors("swap in the rebuilt collection"):
            try:
                staged = self.client.get_collection(staging_collection_name(name), embedding_function=None)
            except NotFoundError:
                staged = None  # already renamed before a crash
            if staged is not None:
                with contextlib.suppress(NotFoundError):
                    self.client.delete_collection(collection_name(name))
                staged.modify(name=collection_name(name))
        self.core.ledger.swap_done(name)
