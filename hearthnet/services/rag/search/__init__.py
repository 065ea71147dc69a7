"""How a query finds chunks: exact search over in-memory copies (:mod:`.exact`, kept by
:mod:`.memory`), ChromaDB's HNSW index (:mod:`.hnsw`), the filters every path shares
(:mod:`.filters`), and whether a query searches on the event loop or in a thread (:mod:`.choice`)."""
