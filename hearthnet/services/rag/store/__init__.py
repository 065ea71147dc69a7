"""Where corpora are kept: the ledger (:mod:`.ledger`), ChromaDB (:mod:`.chroma`), the atomic write
of a document (:mod:`.write`), vector queries (:mod:`.vector_index`), keyword and hybrid queries
(:mod:`.keyword_index`) and the swap of a reindex (:mod:`.swap`), brought together in
:class:`CorpusStore`; :class:`LocalCorpus` serves one of its corpora to ``rag.query``."""

from hearthnet.services.rag.store.chroma import (
    HNSW_PARAMS,
    collection_name,
    corpus_from_collection,
    staging_collection_name,
)
from hearthnet.services.rag.store.ledger import SCHEMA_VERSION, CorpusRecord
from hearthnet.services.rag.store.local_corpus import LocalCorpus
from hearthnet.services.rag.store.store import CorpusStore
from hearthnet.services.rag.store.write import CHUNK_KEYS, DocumentSource

__all__ = [
    "CHUNK_KEYS",
    "HNSW_PARAMS",
    "SCHEMA_VERSION",
    "CorpusRecord",
    "CorpusStore",
    "DocumentSource",
    "LocalCorpus",
    "collection_name",
    "corpus_from_collection",
    "staging_collection_name",
]
