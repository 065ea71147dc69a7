"""Where corpora are kept: :class:`CorpusStore`, composed of parts that are each their own object
given what it uses of the store — the ledger (:mod:`.ledger`), the collections (:mod:`.chroma`),
the document list (:mod:`.document_list`), the vector index (:mod:`.vector_index`), the keyword
index (:mod:`.keyword_index`) and the swap of a reindex (:mod:`.swap`); the store keeps the
atomic write and delete of a document (:mod:`.write`).  :class:`LocalCorpus` serves one of its
corpora to ``rag.query``."""

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
