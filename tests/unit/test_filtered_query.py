"""Filtered queries: the over-fetch path gives exactly what ChromaDB's own filtered search gives."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.services.rag.store import CorpusStore, build_where, where_matches
from tests.unit.test_corpus_store import fake_chunks, unit_vectors

FILTERS: list[dict[str, Any]] = [
    {"page": {"$gte": 3}},
    {"language": "de"},
    {"page": {"$lt": 2}},
    {"$or": [{"page": 1}, {"language": "de"}]},
    {"doc_cid": {"$in": ["d0", "d3"]}},
    {"doc_cid": {"$nin": ["d0", "d1", "d2"]}, "page": {"$lte": 4}},
    {"page": {"$ne": 2}},
    {"doc_cid": "d5", "page": 6},  # very selective: falls back to ChromaDB's filter
]


@pytest.fixture(scope="module", params=["exact", "hnsw"])
def store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """Exact in-memory search and the HNSW over-fetch path must both agree with ChromaDB's filter."""
    budget = 0 if request.param == "hnsw" else 30_000
    s = CorpusStore(tmp_path_factory.mktemp("filtered") / "rag", exact_max_chunks=budget)
    s.create_corpus("c", embedding_model="m", dim=16)
    for d in range(6):
        chunks = fake_chunks(f"d{d}", 60, language="de" if d % 2 else "en")
        s.add_document("c", chunks, unit_vectors(60, seed=d))
    yield s
    s.close()


@pytest.mark.parametrize("flt", FILTERS)
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_overfetch_matches_chromadb_filtered_search(
    store: CorpusStore, flt: dict[str, Any], seed: int
) -> None:
    query = unit_vectors(1, seed=seed)[0]
    ours = store.query("c", query, k=10, where=flt)
    col = store._collection("c")
    res = col.query(
        query_embeddings=[query], n_results=10, where=build_where(flt), include=["metadatas", "documents"]
    )
    assert [h.chunk_id for h in ours] == res["ids"][0]
    assert [h.text for h in ours] == res["documents"][0]
    assert [h.metadata for h in ours] == res["metadatas"][0]
    assert all(where_matches(build_where(flt), h.metadata) for h in ours)
    scores = [h.score for h in ours]
    assert scores == sorted(scores, reverse=True)


def test_where_matches_treats_missing_keys_and_types_strictly() -> None:
    md = {"page": 3, "language": "en", "flag": True}
    assert where_matches(build_where({"page": {"$gt": 2}}), md)
    assert not where_matches(build_where({"missing": "x"}), md)
    assert not where_matches(build_where({"missing": {"$ne": "x"}}), md)
    assert not where_matches(build_where({"language": {"$gt": 1}}), md)
    assert not where_matches(build_where({"flag": {"$gte": 0}}), md)
    assert where_matches(build_where({"$and": [{"page": 3}, {"language": {"$in": ["en", "de"]}}]}), md)
