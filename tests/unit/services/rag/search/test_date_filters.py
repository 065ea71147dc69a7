"""Date and date-time metadata filtered with ``$gt/$gte/$lt/$lte`` given ISO strings: a date range
returns exactly the documents in it, on every query path (exact, HNSW, keyword)."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.rag.search.filters import build_where, chroma_where, where_matches
from hearthnet.services.rag.store import CorpusStore
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors

DATED: dict[str, Any] = {
    "jan": "2024-01-15",
    "feb": "2024-02-29",
    "mar01": "2024-03-01",
    "mar12": "2024-03-12T23:59:59",
    "mar31": "2024-03-31T12:00:00+02:00",  # 10:00 UTC: still March
    "apr01": "2024-04-01",
    "apr01tz": "2024-04-01T00:30:00+02:00",  # 22:30 UTC on March 31
    "words": "not a date",
    "number": 20240310,
}
MARCH = {"$and": [{"timestamp": {"$gte": "2024-03-01"}}, {"timestamp": {"$lte": "2024-03-31"}}]}


@pytest.fixture(scope="module", params=["exact", "hnsw"])
def store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    budget = 0 if request.param == "hnsw" else 30_000
    s = CorpusStore(tmp_path_factory.mktemp("dated") / "rag", exact_max_chunks=budget)
    s.create_corpus("c", embedding_model="m", dim=16)
    for i, (doc, when) in enumerate([*DATED.items(), ("undated", None)]):
        chunks = fake_chunks(doc, 4)
        for c in chunks:
            if when is not None:
                c.metadata["timestamp"] = when
        s.add_document("c", chunks, unit_vectors(4, seed=60 + i))
    yield s
    s.close()


def docs(store: CorpusStore, flt: dict[str, Any]) -> set[str]:
    q = unit_vectors(1, seed=5)[0]
    dense = {h.metadata["doc_cid"] for h in store.query("c", q, k=50, where=flt)}
    words = store.query_words("c", q, "chunk of", k=50, mode="hybrid", where=flt)
    assert {h.metadata["doc_cid"] for h in words} <= dense  # the keyword leg filters alike
    return dense


def test_a_date_range_returns_exactly_the_documents_in_it(store: CorpusStore) -> None:
    assert docs(store, MARCH) == {"mar01", "mar12", "mar31", "apr01tz"}
    assert docs(store, {"timestamp": {"$lt": "2024-03-01"}}) == {"jan", "feb"}
    assert docs(store, {"timestamp": {"$gt": "2024-03-12"}}) == {
        "mar31",
        "apr01",
        "apr01tz",
    }  # after the 12th
    assert docs(store, {"timestamp": {"$gte": "2024-03-12"}}) == {"mar12", "mar31", "apr01", "apr01tz"}
    assert docs(store, {"timestamp": {"$gt": "2024-03-12T12:00:00"}}) == {
        "mar12",
        "mar31",
        "apr01",
        "apr01tz",
    }
    assert docs(store, {"timestamp": {"$lte": "2024-03-12T23:59:58Z"}}) == {"jan", "feb", "mar01"}
    # a number compares with numbers only, as before
    assert docs(store, {"timestamp": {"$gte": 20240101}}) == {"number"}


def test_every_path_agrees_with_where_matches() -> None:
    clause = build_where(MARCH)
    assert chroma_where(clause) is None  # ChromaDB compares no strings by range: the store checks
    assert where_matches(clause, {"timestamp": "2024-03-15"})
    assert not where_matches(clause, {"timestamp": "2024-04-01"})
    assert not where_matches(clause, {"timestamp": 5})
    assert not where_matches(clause, {"other": "2024-03-15"})
    assert build_where(clause) == clause


@pytest.mark.parametrize("bad", ["March", "2024-13-01", "2024-03-12T25:00", "", "12/03/2024", True])
def test_a_range_given_something_that_is_neither_a_number_nor_a_date_is_a_bad_request(bad: Any) -> None:
    with pytest.raises(BadRequest, match=r"ISO 8601|number"):
        build_where({"timestamp": {"$gte": bad}})
