"""The store's document list (a part :class:`~hearthnet.services.rag.store.store.CorpusStore`
composes): a corpus's complete documents as the ledger records them, read under the store's lock,
and the metadata keys they have (cached until a document of the corpus completes or goes)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import structlog

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.rag.chunks import check_extra_metadata
from hearthnet.services.rag.store.chroma import chroma_errors
from hearthnet.services.rag.store.core import StoreCore
from hearthnet.services.rag.store.ledger import metadata_json
from hearthnet.services.rag.store.write import CHUNK_KEYS, user_metadata

__all__ = ["DocumentList"]

_log = structlog.get_logger("hearthnet.rag.store")


@dataclass(kw_only=True, eq=False)
class DocumentList:
    """The documents of the store's corpora.

    Given what it uses of the store: its ``core`` (a document's metadata from before the ledger
    kept it is read from a chunk of its collection) and ``remote`` (ChromaDB is a server: a missing
    collection leaves such metadata unknown).  Blocking, thread-safe.
    """

    core: StoreCore
    remote: bool
    _metadata_keys: dict[str, frozenset[str] | None] = field(default_factory=dict, init=False)
    """Per corpus, the metadata keys its complete documents have (see :meth:`metadata_keys`)."""

    def changed(self, name: str) -> None:
        """A document of ``name`` completed or started going (or the corpus went): keys read again."""
        with self.core.lock:
            self._metadata_keys.pop(name, None)

    def has_document(self, name: str, doc_cid: str) -> bool:
        self.core.collection(name)
        with self.core.lock:
            st = self.core.ledger.status(name, doc_cid)
        return st is not None and st[0] == "complete"

    def document_chunk_count(self, name: str, doc_cid: str) -> int:
        self.core.collection(name)
        with self.core.lock:
            st = self.core.ledger.status(name, doc_cid)
        return st[1] if st is not None and st[0] == "complete" else 0

    def document_tokens(self, name: str, doc_cid: str) -> int:
        """Estimated tokens indexed for a complete document (0 if absent)."""
        self.core.collection(name)
        with self.core.lock:
            return self.core.ledger.tokens(name, doc_cid)

    def documents(self, name: str) -> list[dict[str, Any]]:
        """Complete documents of a corpus: ``{doc_cid, title, language, chunks, tokens, metadata, filename}``.

        ``metadata`` is the caller's metadata given at ingest (what a reindex must keep).
        """
        return self._documents(name, None)

    def document(self, name: str, doc_cid: str) -> dict[str, Any] | None:
        """One complete document as in :meth:`documents`, or ``None``.

        ``NotFound`` if the corpus's collection is missing (its chunks cannot
        be answered, so "already ingested" would not be true).
        """
        self.core.collection(name)
        found = self._documents(name, doc_cid)
        return found[0] if found else None

    def _documents(self, name: str, doc_cid: str | None) -> list[dict[str, Any]]:
        validate_corpus_name(name)
        with self.core.lock:
            if self.core.ledger.corpus(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            rows = self.core.ledger.complete_documents(name, doc_cid)
        out = []
        for cid, title, language, chunks, tokens, meta, filename in rows:
            # the ledger keeps the metadata (older ledgers did not: then it is read from a chunk), so
            # a reindex can rebuild a corpus whose collection is missing on a ChromaDB server
            metadata = metadata_json(meta)
            out.append(
                {
                    "doc_cid": str(cid),
                    "title": str(title),
                    "language": language,
                    "chunks": int(chunks),
                    "tokens": int(tokens),
                    "metadata": metadata if metadata is not None else self._old_metadata(name, str(cid)),
                    "filename": filename,
                }
            )
        return out

    def _old_metadata(self, name: str, doc_cid: str) -> dict[str, Any]:
        """Metadata of a row from before the ledger kept it: from a chunk, or none if the
        collection is missing on a server (a reindex then rebuilds the document without it)."""
        try:
            col = self.core.collection(name)
        except NotFound:
            if not self.remote:
                raise
            _log.warning("rag_metadata_unrecoverable", corpus=name, doc_cid=doc_cid)
            return {}
        with chroma_errors("read document metadata"):
            got = col.get(where={"doc_cid": doc_cid}, limit=1, include=["metadatas"])
        metas = got.get("metadatas") or [{}]
        out: dict[str, Any] = {}
        for key, value in user_metadata((metas[0] if metas else None) or {}).items():
            with contextlib.suppress(BadRequest):  # a field older versions let through (e.g. NaN)
                out.update(check_extra_metadata({key: value}))
        return out

    def page(self, name: str, *, after: str = "", limit: int = 200) -> tuple[list[dict[str, Any]], int]:
        """A page of the corpus's complete documents by ``doc_cid`` (those after ``after``), and how
        many it has in all: ``{doc_cid, title, filename, pages, chunks, language, ingested_by,
        ingested_at}`` (``None`` where the ledger predates the field)."""
        validate_corpus_name(name)
        with self.core.lock:
            if self.core.ledger.corpus(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            return self.core.ledger.page(name, after=after, limit=limit)

    def metadata_keys(self, name: str) -> frozenset[str] | None:
        """The metadata keys the corpus's complete documents have, or ``None`` if unknown (a
        document from before the ledger kept metadata).  From the ledger, cached until a
        document of the corpus completes or goes."""
        with self.core.lock:
            if name in self._metadata_keys:
                return self._metadata_keys[name]
            keys: set[str] | None = set(CHUNK_KEYS)
            for meta, has_file in self.core.ledger.metadata_of(name):
                found = metadata_json(meta)
                if found is None:
                    keys = None
                    break
                assert keys is not None
                keys.update(found)
                if has_file:
                    keys.add("doc_filename")
            self._metadata_keys[name] = None if keys is None else frozenset(keys)
            return self._metadata_keys[name]
