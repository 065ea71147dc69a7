"""The RAG service, along the data's route: :mod:`.service` (the handlers) -> :mod:`.ingest` (read,
chunk, embed, then :mod:`.store` writes and :mod:`.offers` announces) ; :mod:`.store` (ledger,
ChromaDB, the atomic document write, the swap of a reindex) ; :mod:`.search` (exact, HNSW,
filters, loop or thread) ; :mod:`.archives` (external ChromaDB collections).  What every stage
shares: :mod:`.chunks` and :class:`~.results.Hit`."""
