"""Exact in-memory search of small corpora: equal to brute force, and always equal to the corpus."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.errors import BadRequest
from hearthnet.services.rag.search.exact import ExactIndex
from hearthnet.services.rag.search.filters import build_where, where_matches
from hearthnet.services.rag.store import CorpusStore
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors


def brute_force(vecs: np.ndarray, metas: list[dict[str, Any]], q: np.ndarray, k: int, flt: Any) -> list[int]:
    sims = vecs @ (q / np.linalg.norm(q))
    order = sorted(range(len(vecs)), key=lambda i: (-sims[i], i))
    clause = build_where(flt) if flt else None
    return [i for i in order if clause is None or where_matches(clause, metas[i])][:k]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 80),
    k=st.integers(1, 25),
    seed=st.integers(0, 10_000),
    flt=st.sampled_from([None, {"language": "de"}, {"page": {"$gte": 4}}, {"doc_cid": "none"}]),
)
def test_exact_index_equals_brute_force(n: int, k: int, seed: int, flt: Any) -> None:
    vecs = unit_vectors(n, seed=seed) if n else np.zeros((0, 16), dtype=np.float32)
    chunks = fake_chunks("d", n)
    metas = [dict(c.metadata, language="de" if i % 3 == 0 else "en") for i, c in enumerate(chunks)]
    index = ExactIndex(16)
    index.add([c.chunk_id for c in chunks], vecs, [c.text for c in chunks], metas)
    q = unit_vectors(1, seed=seed + 1)[0] * 3.0  # not unit length: the index normalizes
    clause = build_where(flt) if flt else None
    hits = index.search(q, k, None if clause is None else (lambda md: where_matches(clause, md)))
    assert [h.chunk_id for h in hits] == [chunks[i].chunk_id for i in brute_force(vecs, metas, q, k, flt)]
    assert all(-1.0001 <= h.score <= 1.0001 for h in hits)


def test_remove_doc_keeps_the_rest_in_order() -> None:
    index = ExactIndex(16)
    for d in ("a", "b", "c"):
        chunks = fake_chunks(d, 4)
        index.add(
            [c.chunk_id for c in chunks],
            unit_vectors(4, seed=ord(d)),
            [c.text for c in chunks],
            [c.metadata for c in chunks],
        )
    assert index.remove_doc("b") == 4 and index.remove_doc("b") == 0 and len(index) == 8
    hits = index.search(unit_vectors(1, seed=ord("c"))[0], 8)
    assert {h.metadata["doc_cid"] for h in hits} == {"a", "c"}
    assert hits[0].chunk_id == "c-0"


def test_store_exact_index_follows_adds_deletes_and_budget(tmp_path: Path) -> None:
    store = CorpusStore(tmp_path / "rag", exact_max_chunks=100)
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        va = unit_vectors(30, seed=1)
        store.add_document("kb", fake_chunks("a", 30), va)
        assert store.query("kb", va[5], k=1)[0].chunk_id == "a-5"
        assert len(store._memory.indexes["kb"]) == 30  # loaded on the first query
        vb = unit_vectors(30, seed=2)
        store.add_document("kb", fake_chunks("b", 30), vb)  # added to the loaded index at completion
        assert store.query("kb", vb[7], k=1)[0].chunk_id == "b-7"
        assert store.delete_document("kb", "a") == 30
        assert len(store._memory.indexes["kb"]) == 30
        assert store.query("kb", va[5], k=1)[0].metadata["doc_cid"] == "b"
        store.add_document("kb", fake_chunks("c", 80), unit_vectors(80, seed=3))  # 110 > 100: HNSW
        assert "kb" not in store._memory.indexes
        assert store.query("kb", vb[7], k=1)[0].chunk_id == "b-7"
        assert store.delete_document("kb", "c") == 80  # fits again: reloaded from ChromaDB
        assert store.query("kb", vb[7], k=1)[0].chunk_id == "b-7" and len(store._memory.indexes["kb"]) == 30
    finally:
        store.close()


def test_document_being_written_is_invisible_to_exact_search(tmp_path: Path) -> None:
    """A query between a document's batches sees none of it, even when it loads the index then."""
    store = CorpusStore(tmp_path / "rag", batch_size=10)
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        store.add_document("kb", fake_chunks("a", 10), unit_vectors(10, seed=1))
        vb = unit_vectors(30, seed=2)
        midway, resume = threading.Event(), threading.Event()
        seen: list[set[str]] = []
        real = store._write_batch

        def paused(*args: Any) -> None:
            real(*args)
            if not midway.is_set():
                midway.set()
                assert resume.wait(30)

        store._write_batch = paused  # type: ignore[method-assign]
        writer = threading.Thread(target=store.add_document, args=("kb", fake_chunks("b", 30), vb))
        writer.start()
        assert midway.wait(30)
        seen.append({h.metadata["doc_cid"] for h in store.query("kb", vb[0], k=20)})  # loads the index now
        resume.set()
        writer.join(30)
        seen.append({h.metadata["doc_cid"] for h in store.query("kb", vb[0], k=20)})
        assert seen == [{"a"}, {"a", "b"}]
        assert len(store._memory.indexes["kb"]) == 40
    finally:
        store.close()


@pytest.mark.parametrize("include_text", [True, False])
def test_exact_and_hnsw_paths_agree_on_real_store(tmp_path: Path, include_text: bool) -> None:
    exact = CorpusStore(tmp_path / "e")
    hnsw = CorpusStore(tmp_path / "h", exact_max_chunks=0)
    try:
        for s in (exact, hnsw):
            s.create_corpus("kb", embedding_model="m", dim=16)
            for d in range(4):
                s.add_document("kb", fake_chunks(f"d{d}", 25), unit_vectors(25, seed=d))
        for seed in range(5):
            q = unit_vectors(1, seed=100 + seed)[0]
            a = exact.query("kb", q, k=10, include_text=include_text)
            b = hnsw.query("kb", q, k=10, include_text=include_text)
            assert [(h.chunk_id, h.text, h.metadata) for h in a] == [
                (h.chunk_id, h.text, h.metadata) for h in b
            ]
            assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
        assert "kb" in exact._memory.indexes and not hnsw._memory.indexes
    finally:
        exact.close()
        hnsw.close()


def test_a_load_racing_a_completed_write_is_discarded(tmp_path: Path) -> None:
    store = CorpusStore(tmp_path / "rag")
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        store.add_document("kb", fake_chunks("a", 5), unit_vectors(5, seed=1))
        store._memory.indexes.pop("kb")  # as after a restart: the copy is loaded on first use
        col = store._collection("kb")

        class WriteDuringLoad:
            fired = False

            def get(self, **kw: Any) -> Any:
                if not self.fired:
                    self.fired = True  # a document completes while the copy is being read
                    store.add_document("kb", fake_chunks("b", 5), unit_vectors(5, seed=2))
                return col.get(**kw)

        assert store._vectors.exact_index("kb", WriteDuringLoad()) is None
        assert "kb" not in store._memory.indexes
        hits = store.query("kb", unit_vectors(5, seed=2)[0], k=10)  # loads a fresh copy
        assert len(store._memory.indexes["kb"]) == 10 and {h.metadata["doc_cid"] for h in hits} == {"a", "b"}
    finally:
        store.close()


def test_warm_exact_loads_what_fits(tmp_path: Path) -> None:
    store = CorpusStore(tmp_path / "rag", exact_max_chunks=50)
    try:
        for name, n in (("small", 20), ("large", 60)):
            store.create_corpus(name, embedding_model="m", dim=16)
            store.add_document(name, fake_chunks(name, n), unit_vectors(n, seed=n))
        assert store.warm_exact() == ["small"]
        assert set(store._memory.indexes) == {"small"}
        assert store.query("large", unit_vectors(60, seed=60)[3], k=1)[0].chunk_id == "large-3"  # HNSW
    finally:
        store.close()


def test_a_load_of_the_old_collection_is_not_installed_after_a_replace(tmp_path: Path) -> None:
    """A load reads the collection, a reindex replaces it meanwhile: the stale copy must not be kept."""
    store = CorpusStore(tmp_path / "rag")
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        va = unit_vectors(4, seed=1)
        store.add_document("kb", fake_chunks("a", 4), va)
        store._memory.indexes.clear()  # as after a start: loaded on the first query
        old = store._collection("kb")
        read, install = threading.Event(), threading.Event()

        class PausedLoad:
            def get(self, **kw: Any) -> Any:
                got = old.get(**kw)
                if not got["ids"]:  # every page of the old collection read: stall before installing
                    read.set()
                    assert install.wait(30)
                return got

        loader = threading.Thread(target=store._vectors.exact_index, args=("kb", PausedLoad()))
        loader.start()
        assert read.wait(30)
        write_batch = store._write_batch

        def install_after_first_batch(*args: Any) -> None:
            write_batch(*args)
            if not install.is_set():  # the old collection is gone, the document not complete yet
                install.set()
                loader.join(30)

        store._write_batch = install_after_first_batch  # type: ignore[method-assign]
        store.replace_corpus("kb", embedding_model="m", dim=16, documents=[(fake_chunks("a", 4), va)])
        hits = store.query("kb", va[1], k=4)
        assert sorted(h.chunk_id for h in hits) == ["a-0", "a-1", "a-2", "a-3"]
        assert len(store._memory.indexes["kb"]) == store.info("kb").chunks == 4
    finally:
        store.close()


def test_a_new_corpus_is_searched_exactly_from_its_first_document_without_a_load(tmp_path: Path) -> None:
    """After a bulk ingest into a new corpus no query reads the whole corpus back from ChromaDB."""
    store = CorpusStore(tmp_path / "rag")
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        for name in ("a", "b", "c"):
            store.add_document("kb", fake_chunks(name, 4), unit_vectors(4, seed=ord(name)))
        assert len(store._memory.indexes["kb"]) == 12

        class NoLoad:
            def get(self, **kw: Any) -> Any:
                raise AssertionError("the exact index was loaded from ChromaDB")

        assert store._vectors.exact_index("kb", NoLoad()) is store._memory.indexes["kb"]
        hits = store.query("kb", unit_vectors(4, seed=ord("b"))[2], k=1)
        assert hits[0].chunk_id == "b-2" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    finally:
        store.close()


def test_queries_during_a_load_use_hnsw_instead_of_loading_a_copy_each(tmp_path: Path) -> None:
    """The first queries after a start used to load the whole corpus once each, in parallel."""
    store = CorpusStore(tmp_path / "rag")
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        va = unit_vectors(40, seed=1)
        store.add_document("kb", fake_chunks("a", 40), va)
        store._memory.indexes.clear()  # as after a start: loaded on the first query
        real = store._collection("kb")
        reading, finish = threading.Event(), threading.Event()
        loads: list[int] = []

        class PausedLoad:
            def get(self, **kw: Any) -> Any:
                if kw.get("offset") == 0:
                    loads.append(1)
                reading.set()
                assert finish.wait(30)
                return real.get(**kw)

        loader = threading.Thread(target=store._vectors.exact_index, args=("kb", PausedLoad()))
        loader.start()
        assert reading.wait(30)
        assert store._vectors.exact_index("kb", PausedLoad()) is None  # no second load: this query uses HNSW
        hits = store.query("kb", va[7], k=3)  # answered meanwhile, through HNSW
        assert hits[0].chunk_id == "a-7" and "kb" not in store._memory.indexes
        finish.set()
        loader.join(30)
        assert loads == [1] and len(store._memory.indexes["kb"]) == 40
        assert store.query("kb", va[9], k=1)[0].chunk_id == "a-9"
    finally:
        store.close()


def test_query_in_memory_answers_as_query_or_declines_without_waiting(tmp_path: Path) -> None:
    """The event loop's search: the same hits as query(); None (never a wait) while a write holds
    the store lock, for a filter, for a copy over the size given, or before the corpus has a copy."""
    store = CorpusStore(tmp_path / "rag", exact_max_chunks=100)
    try:
        store.create_corpus("kb", embedding_model="m", dim=16)
        v = unit_vectors(30, seed=4)
        store.add_document("kb", fake_chunks("a", 30), v)
        store.create_corpus("big", embedding_model="m", dim=16)
        store.add_document("big", fake_chunks("b", 200), unit_vectors(200, seed=5))  # over 100: HNSW
        store.query("kb", v[3], k=1)  # the collection handle is known from here on
        store.query("big", v[3], k=1)
        for q in (v[3], v[9] * 2.0):
            want = [(h.chunk_id, h.text) for h in store.query("kb", q, k=5)]
            got = store.query_in_memory("kb", q, k=5, max_floats=10_000)
            assert got is not None and [(h.chunk_id, h.text) for h in got] == want
        assert store.query_in_memory("kb", v[3], k=5, max_floats=30 * 16 - 1) is None  # too big here
        assert store.query_in_memory("kb", v[3], k=5, where={"page": 1}, max_floats=10_000) is None
        assert store.query_in_memory("big", v[3], k=5, max_floats=10**9) is None  # no copy
        assert store.query_in_memory("nope", v[3], k=5, max_floats=10**9) is None
        with pytest.raises(BadRequest):
            store.query_in_memory("kb", v[3][:8], k=5, max_floats=10_000)
        held, release = threading.Event(), threading.Event()

        def write() -> None:
            with store._lock:
                held.set()
                release.wait(10)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            assert held.wait(10)
            assert store.query_in_memory("kb", v[3], k=5, max_floats=10_000) is None  # at once
        finally:
            release.set()
            writer.join()
    finally:
        store.close()
