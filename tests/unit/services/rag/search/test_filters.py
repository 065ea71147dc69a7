"""Filtered queries: the over-fetch path gives exactly what ChromaDB's own filtered search gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.search import filters as filters_module
from hearthnet.services.rag.search.filters import (
    MAX_FILTER_CONDITIONS,
    MAX_FILTER_DEPTH,
    MAX_IN_VALUES,
    build_where,
    compile_where,
    where_matches,
)
from hearthnet.services.rag.store import CorpusStore
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors

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
    assert where_matches(build_where({"missing": {"$ne": "x"}}), md)  # as ChromaDB: $ne/$nin need no key
    assert where_matches(build_where({"missing": {"$nin": ["x"]}}), md)
    assert not where_matches(build_where({"missing": {"$in": ["x"]}}), md)
    assert not where_matches(build_where({"page": True}), md)  # a boolean equals only a boolean
    assert not where_matches(build_where({"flag": 1}), md)
    assert where_matches(build_where({"page": 3.0}), md)
    assert not where_matches(build_where({"page": "3"}), md)
    assert not where_matches(build_where({"language": {"$gt": 1}}), md)
    assert not where_matches(build_where({"flag": {"$gte": 0}}), md)
    assert where_matches(build_where({"$and": [{"page": 3}, {"language": {"$in": ["en", "de"]}}]}), md)


def _typed_chunks(doc: str, n: int, extra: dict[str, Any]) -> list[Chunk]:
    return [
        Chunk(c.chunk_id, c.text, {**c.metadata, "page": i % 3 + 1, **extra})
        for i, c in enumerate(fake_chunks(doc, n))
    ]


AGREEMENT = [
    {"page": True},
    {"page": 1.0},
    {"page": {"$in": [True]}},
    {"page": {"$in": [1, "a"]}},
    {"page": {"$in": [1, 2.5]}},
    {"page": {"$in": [1, True]}},
    {"page": {"$nin": [1, 2.5, "x"]}},
    {"page": {"$eq": 1.5}},
    {"page": {"$ne": 1.5}},
    {"page": {"$gt": 1.5}},
    {"page": {"$gte": -0.5}},
    {"chunk_index": {"$lt": 2.5}},
    {"chunk_index": {"$lte": 2.5}},
    {"layer": {"$ne": "y"}},
    {"layer": {"$nin": ["y"]}},
    {"layer": {"$ne": "x"}},
    {"score": 1},
    {"score": {"$gt": 1.25}},
    {"score": {"$lt": 2}},
    {"flag": {"$ne": True}},
    {"flag": False},
    {"$or": [{"page": 1}, {"layer": "x"}]},
    {"$or": [{"page": {"$ne": 2.5}}, {"layer": "x"}]},
    {"$and": [{"page": {"$gte": 1.5}}, {"score": {"$lte": 1.5}}]},
]


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two stores (exact, HNSW) with ints, floats, booleans, strings and missing keys."""
    stores = {}
    for path, budget in (("exact", 30_000), ("hnsw", 0)):
        s = CorpusStore(tmp_path_factory.mktemp(path) / "rag", exact_max_chunks=budget)
        s.create_corpus("c", embedding_model="m", dim=16)
        docs = (
            ("a", {"layer": "x", "score": 1.5, "flag": True}),
            ("b", {"score": 2.0, "flag": False}),
            ("c", {}),
        )
        metas = []
        for i, (doc, extra) in enumerate(docs):
            chunks = _typed_chunks(doc, 8, extra)
            s.add_document("c", chunks, unit_vectors(8, seed=40 + i))
            metas += [(c.chunk_id, c.metadata) for c in chunks]
        stores[path] = s
    yield stores, metas
    for s in stores.values():
        s.close()


@pytest.mark.parametrize("flt", AGREEMENT)
def test_every_query_path_gives_what_where_matches_defines(typed: Any, flt: dict[str, Any]) -> None:
    """Exact search, the over-fetch path (k=1) and ChromaDB's filter (k=24) agree, value types included."""
    stores, metas = typed
    clause = build_where(flt)
    expected = {cid for cid, md in metas if where_matches(clause, md)}
    q = unit_vectors(1, seed=7)[0]
    for path, s in stores.items():
        everything = s.query("c", q, k=24, where=flt)
        assert {h.chunk_id for h in everything} == expected, path
        first = s.query("c", q, k=1, where=flt)
        assert [h.chunk_id for h in first] == [h.chunk_id for h in everything][:1], path


def test_semantics_of_the_tricky_filters(typed: Any) -> None:
    stores, metas = typed

    def by_doc(flt: dict[str, Any]) -> set[str]:
        return {cid.split("-")[0] for cid, md in metas if where_matches(build_where(flt), md)}

    assert by_doc({"page": True}) == set()  # a boolean never equals a number
    assert by_doc({"layer": {"$ne": "x"}}) == {"b", "c"}  # chunks without the key match $ne
    assert by_doc({"score": {"$lt": 2}}) == {"a"}  # no key, no range match
    q = unit_vectors(1, seed=7)[0]
    for s in stores.values():
        pages = {
            h.metadata["chunk_index"] for h in s.query("c", q, k=24, where={"chunk_index": {"$lt": 2.5}})
        }
        assert pages == {0, 1, 2}  # not ChromaDB's truncation to < 2
        assert s.query("c", q, k=24, where={"page": {"$eq": 1.5}}) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"page": 10**30},
        {"page": {"$gt": -(10**20)}},
        {"page": float("inf")},
    ],
)
def test_out_of_range_operands_are_a_bad_request(bad: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        build_where(bad)


def test_deep_or_huge_filters_are_a_bad_request() -> None:
    deep: dict[str, Any] = {"page": 1}
    for _ in range(500):
        deep = {"$and": [deep, {"page": 1}]}
    with pytest.raises(BadRequest, match="nested deeper"):
        build_where(deep)
    with pytest.raises(BadRequest, match="more than"):
        build_where({"$or": [{"page": i} for i in range(MAX_FILTER_CONDITIONS + 1)]})
    ok: dict[str, Any] = {"page": 1}
    for _ in range(MAX_FILTER_DEPTH):
        ok = {"$or": [ok, {"page": 2}]}
    assert where_matches(build_where(ok), {"page": 2})


def test_a_filter_at_the_depth_limit_stays_valid_once_built() -> None:
    """Several keys in one object become an $and: validating the built clause again must not fail."""
    flt: dict[str, Any] = {"page": 1, "language": "en"}
    wrapped = 0
    while True:
        try:
            built = build_where(flt)
        except BadRequest as exc:
            assert "nested deeper" in exc.message
            break
        assert build_where(built) == built
        flt = {"$or": [flt, {"page": 2}]}
        wrapped += 1
    assert wrapped == MAX_FILTER_DEPTH  # 7 $or around the implicit $and of the two keys: 8 levels
    single: dict[str, Any] = {"page": 1}
    for _ in range(3 * MAX_FILTER_DEPTH):  # one-element lists collapse: no depth in the output
        single = {"$and": [single]}
    assert build_where(single) == {"page": {"$eq": 1}}


def test_a_filter_that_chromadb_can_only_approximate_rechecks_a_bounded_number_of_candidates(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``{"score": 1.5}`` is sent widened (1 < score < 2), which every chunk here matches;
    re-checking must stop at ``MAX_RECHECKED`` candidates instead of asking for the whole corpus."""
    import chromadb.api.models.Collection as collection_module

    from hearthnet.services.rag.search.hnsw import MAX_RECHECKED

    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0)  # the HNSW path
    try:
        s.create_corpus("c", embedding_model="m", dim=16)
        for d in range(8):
            chunks = fake_chunks(f"d{d}", 500)
            for i, ch in enumerate(chunks):
                ch.metadata["score"] = 1.0 + (i + 1) / 1001  # floats in (1, 2), never 1.5
            s.add_document("c", chunks, unit_vectors(500, seed=d))
        asked: list[int] = []
        real_query = collection_module.Collection.query

        def counting_query(self: Any, *args: Any, **kwargs: Any) -> Any:
            asked.append(int(kwargs["n_results"]))
            return real_query(self, *args, **kwargs)

        monkeypatch.setattr(collection_module.Collection, "query", counting_query)
        hits = s.query("c", unit_vectors(1, seed=99)[0], k=5, where={"score": 1.5})
        assert hits == []
        assert asked and max(asked) <= MAX_RECHECKED < 4000
    finally:
        s.close()


@pytest.mark.parametrize("flt", [{"chunk_id": "x"}, {"$or": [{"page": 1}, {"chunk_id": {"$ne": "y"}}]}])
def test_a_filter_on_chunk_id_is_a_bad_request_not_an_empty_answer(flt: dict[str, Any]) -> None:
    with pytest.raises(BadRequest, match="chunk_id cannot be filtered"):
        build_where(flt)


_VALUES = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 2.5, -1.5]),
    st.sampled_from(["a", "b", "1", "True"]),
)
_CONDITIONS = st.one_of(
    _VALUES.map(lambda v: {"f": v}),
    st.tuples(st.sampled_from(["$eq", "$ne"]), _VALUES).map(lambda t: {"f": {t[0]: t[1]}}),
    st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(_VALUES, min_size=1, max_size=6)).map(
        lambda t: {"f": {t[0]: t[1]}}
    ),
    st.tuples(st.sampled_from(["$gt", "$lt"]), st.integers(-3, 3)).map(lambda t: {"g": {t[0]: t[1]}}),
)
_FILTERS = st.recursive(
    _CONDITIONS,
    lambda inner: st.tuples(st.sampled_from(["$and", "$or"]), st.lists(inner, min_size=1, max_size=3)).map(
        lambda t: {t[0]: t[1]}
    ),
    max_leaves=8,
)
_METADATA = st.dictionaries(st.sampled_from(["f", "g"]), _VALUES, max_size=2)


@settings(max_examples=400, deadline=None)
@given(flt=_FILTERS, metadata=_METADATA)
def test_the_compiled_filter_means_what_where_matches_defines(
    flt: dict[str, Any], metadata: dict[str, Any]
) -> None:
    clause = build_where(flt)
    assert compile_where(clause)(metadata) == where_matches(clause, metadata)


def test_many_in_values_cost_no_more_per_chunk_and_are_capped_in_all() -> None:
    """64 lists of 1,000 values matching nothing took 117 ms per chunk: a few queries held every
    store thread for an hour on a 30k-chunk corpus."""
    half = [f"cid-{i}" for i in range(MAX_IN_VALUES // 2)]
    with pytest.raises(BadRequest, match=f"more than {MAX_IN_VALUES} \\$in/\\$nin values in all"):
        build_where({"$or": [{"doc_cid": {"$in": half}}, {"page": {"$nin": half}}, {"x": {"$in": ["y"]}}]})
    clause = build_where({"$or": [{"doc_cid": {"$in": half}}, {"title": {"$in": half}}]})
    matches = compile_where(clause)
    chunk = {"doc_cid": "other", "title": "t", "page": 3}
    calls = 0
    real = filters_module._kind

    def counted(value: Any) -> str:
        nonlocal calls
        calls += 1
        return real(value)

    filters_module._kind = counted  # type: ignore[assignment]
    try:
        assert not matches(chunk)
    finally:
        filters_module._kind = real  # type: ignore[assignment]
    assert calls <= 4  # one lookup per list, not one comparison per value
    assert matches({"doc_cid": half[-1]}) and where_matches(clause, {"doc_cid": half[-1]})
