"""The keyword index as part of the store: written and deleted with the vectors (a document is in
both indexes or in neither, across ``kill -9``), rebuilt by a reindex, built from ChromaDB for a
corpus that predates it; keyword and hybrid queries on both query paths (in memory, HNSW)."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hearthnet.errors import BadRequest, NotFound
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.store import CorpusStore, LocalCorpus
from tests.unit.services.rag.store.test_store import _run, unit_vectors

WORDS = ("boiler", "valve", "gasket", "heater", "pump", "filter", "pipe", "meter")


def doc(doc_cid: str, n: int, *, language: str = "en") -> list[Chunk]:
    """``n`` chunks, the i-th naming part ``<doc>-P<i>`` and two common words."""
    return [
        Chunk(
            chunk_id=f"{doc_cid}-{i}",
            text=f"part {doc_cid.upper()}-P{i} {WORDS[i % len(WORDS)]} {WORDS[(i + 3) % len(WORDS)]}",
            metadata={
                "doc_cid": doc_cid,
                "doc_title": doc_cid,
                "page": 1 + i // 3,
                "chunk_index": i,
                "language": language,
                "char_start": 0,
                "char_end": 1,
                "tokens": 3,
            },
        )
        for i in range(n)
    ]


def keyword_rows(root: Path, corpus: str) -> dict[str, int]:
    """doc_cid -> keyword rows, read from the ledger's database directly."""
    db = sqlite3.connect(root / "ledger.sqlite3")
    try:
        rows = db.execute(
            "SELECT doc_cid, COUNT(*) FROM keyword_chunks WHERE corpus = ? GROUP BY doc_cid", (corpus,)
        ).fetchall()
        fts = db.execute(f'SELECT COUNT(*) FROM "keywords:{corpus}"').fetchone()[0]
        assert fts == sum(n for _, n in rows)  # the FTS table indexes exactly those rows
        return {str(d): int(n) for d, n in rows}
    finally:
        db.close()


def found_docs(
    store: CorpusStore, corpus: str, text: str, mode: str = "keyword", k: int = 20, dim: int = 16
) -> set[str]:
    hits = store.query_words(corpus, unit_vectors(1, dim=dim, seed=5)[0], text, k=k, mode=mode)
    return {str(h.metadata["doc_cid"]) for h in hits}


@pytest.fixture(params=["exact", "hnsw"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0 if request.param == "hnsw" else 30_000)
    s.create_corpus("kb", embedding_model="m", dim=16)
    s.add_document("kb", doc("a", 6), unit_vectors(6, seed=1))
    s.add_document("kb", doc("b", 6, language="de"), unit_vectors(6, seed=2))
    yield s
    s.close()


def test_keyword_and_hybrid_queries_find_exact_terms_with_their_cosine(store: CorpusStore) -> None:
    q = unit_vectors(1, seed=5)[0]
    hits = store.query_words("kb", q, "which part is B-P4?", k=3, mode="keyword")
    assert hits[0].chunk_id == "b-4" and hits[0].score > 0
    assert hits[0].text is not None and "B-P4" in hits[0].text
    cosine = float(unit_vectors(6, seed=2)[4] @ q)
    assert hits[0].similarity == pytest.approx(cosine, abs=1e-5)
    hybrid = store.query_words("kb", q, "B-P4", k=3, mode="hybrid")
    assert "b-4" in [h.chunk_id for h in hybrid]
    assert all(0.0 <= h.score <= 1.0 and h.similarity is not None for h in hybrid)
    assert [h.text for h in store.query_words("kb", q, "B-P4", k=1, mode="keyword", include_text=False)] == [
        None
    ]


def test_a_filter_applies_to_both_legs(store: CorpusStore) -> None:
    q = unit_vectors(1, seed=5)[0]
    for mode in ("keyword", "hybrid"):
        hits = store.query_words("kb", q, "boiler valve A-P0", k=10, mode=mode, where={"language": "de"})
        assert hits and {h.metadata["doc_cid"] for h in hits} == {"b"}, mode
    with pytest.raises(BadRequest):
        store.query_words("kb", q, "boiler", k=3, mode="hybrid", where={"hn_x": 1})


def test_bad_mode_k_and_corpus_are_refused(store: CorpusStore) -> None:
    q = unit_vectors(1, seed=5)[0]
    with pytest.raises(BadRequest, match="mode"):
        store.query_words("kb", q, "boiler", k=3, mode="dense")
    with pytest.raises(BadRequest, match="k"):
        store.query_words("kb", q, "boiler", k=0, mode="keyword")
    with pytest.raises(NotFound):
        store.query_words("nope", q, "boiler", k=3, mode="keyword")
    assert store.query_words("kb", q, "?!", k=3, mode="keyword") == []  # no word: nothing matches


def test_delete_removes_the_document_from_both_indexes(store: CorpusStore) -> None:
    assert found_docs(store, "kb", "boiler") == {"a", "b"}
    assert store.delete_document("kb", "a") == 6
    assert found_docs(store, "kb", "boiler") == {"b"}
    assert found_docs(store, "kb", "A-P1", mode="hybrid") <= {"b"}
    assert keyword_rows(store.root, "kb") == {"b": 6}
    assert {h.metadata["doc_cid"] for h in store.query("kb", unit_vectors(1)[0], k=20)} == {"b"}


def test_a_reindex_rebuilds_both_indexes(store: CorpusStore) -> None:
    new = doc("c", 4)
    store.replace_corpus("kb", embedding_model="m2", dim=8, documents=[(new, unit_vectors(4, dim=8))])
    assert keyword_rows(store.root, "kb") == {"c": 4}
    assert found_docs(store, "kb", "C-P2 boiler", dim=8) == {"c"}
    with pytest.raises(BadRequest, match="8 finite floats"):  # the vector of the corpus's model
        found_docs(store, "kb", "C-P2")
    q = unit_vectors(4, dim=8)[2]  # chunk c-2's own vector: first by cosine and by BM25
    assert store.query_words("kb", q, "C-P2", k=1, mode="hybrid")[0].chunk_id == "c-2"


def test_a_corpus_from_before_the_index_gets_it_built_from_chromadb(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    with CorpusStore(root) as s:
        s.create_corpus("old", embedding_model="m", dim=16)
        s.add_document("old", doc("a", 5), unit_vectors(5, seed=1))
        s.add_document("old", doc("b", 3), unit_vectors(3, seed=2))
    # the ledger as a version without the keyword index left it
    db = sqlite3.connect(root / "ledger.sqlite3")
    db.execute('DROP TABLE "keywords:old"')
    db.executescript("DROP TABLE keyword_chunks; DROP TABLE keyword_corpora;")
    db.commit()
    db.close()
    with CorpusStore(root) as s:
        assert not s.keyword_ready("old")
        assert s.build_keywords() == ["old"]
        assert s.keyword_ready("old")
        assert keyword_rows(root, "old") == {"a": 5, "b": 3}
        assert found_docs(s, "old", "A-P3") == {"a"}
        assert s.build_keywords() == []  # once
        s.add_document("old", doc("c", 2), unit_vectors(2, seed=3))
        assert found_docs(s, "old", "C-P1") == {"c"}


_CRASH_WRITER = """
import sys, threading
from pathlib import Path
from hearthnet.services.rag.store import CorpusStore, LocalCorpus
from tests.unit.services.rag.store.test_keyword_index import doc
from tests.unit.services.rag.store.test_store import unit_vectors

class Marking(CorpusStore):
    batches = 0
    def _write_batch(self, *args):
        super()._write_batch(*args)
        Marking.batches += 1
        if Marking.batches == int(sys.argv[2]):
            print("batches-written", flush=True)
            threading.Event().wait()   # hold here until killed

store = Marking(Path(sys.argv[1]), batch_size=10)
store.add_document("crash", doc("big", 40), unit_vectors(40, seed=4))
"""


@pytest.mark.parametrize("killed_after", [2, 4])
def test_kill_9_during_an_ingest_leaves_vectors_and_keywords_consistent(
    tmp_path: Path, killed_after: int
) -> None:
    """Killed after some batches (2) or after the last one, before the document is complete (4 of
    4): at the next open the document is in neither index, the others in both."""
    root = tmp_path / "rag"
    with CorpusStore(root) as s:
        s.create_corpus("crash", embedding_model="m", dim=16)
        s.add_document("crash", doc("small", 4), unit_vectors(4))
    proc = _run(_CRASH_WRITER, str(root), str(killed_after))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "batches-written", proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()

    import chromadb
    from chromadb.config import Settings

    with CorpusStore(root) as s:
        assert keyword_rows(root, "crash") == {"small": 4}
        assert found_docs(s, "crash", "boiler") == {"small"}
        assert found_docs(s, "crash", "BIG-P3 boiler", mode="hybrid") == {"small"}
        s.add_document("crash", doc("big", 40), unit_vectors(40, seed=4))  # and it can be added again
        assert keyword_rows(root, "crash") == {"small": 4, "big": 40}
    client = chromadb.PersistentClient(
        path=str(root / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    assert client.get_collection("hn-crash-v1", embedding_function=None).count() == 44


def test_a_document_is_indexed_only_when_complete(tmp_path: Path) -> None:
    """While its chunks are being written, a document is in neither index for keyword queries."""
    seen: dict[str, Any] = {}

    class Watching(CorpusStore):
        def _write_batch(self, *args: Any) -> None:
            super()._write_batch(*args)
            seen["during"] = found_docs(self, "w", "boiler")
            seen["rows"] = keyword_rows(self.root, "w")

    with Watching(tmp_path / "rag", batch_size=5) as s:
        s.create_corpus("w", embedding_model="m", dim=16)
        s.add_document("w", doc("a", 3), unit_vectors(3))
        s.add_document("w", doc("b", 12), unit_vectors(12, seed=2))
        assert seen["during"] == {"a"}
        assert seen["rows"] == {"a": 3}  # its keyword rows come with the commit that completes it
        assert found_docs(s, "w", "boiler") == {"a", "b"}


def test_a_failed_write_indexes_nothing(tmp_path: Path) -> None:
    class Failing(CorpusStore):
        def _write_batch(self, *args: Any) -> None:
            raise OSError("disk gone")

    with Failing(tmp_path / "rag") as s:
        s.create_corpus("f", embedding_model="m", dim=16)
        with pytest.raises(OSError, match="disk gone"):
            s.add_document("f", doc("a", 3), unit_vectors(3))
        assert keyword_rows(s.root, "f") == {}


def test_the_event_loop_path_answers_as_the_thread_path(store: CorpusStore) -> None:
    """With the keyword leg run ahead, a corpus held in memory is answered without a thread; the
    same hits, scores and cosines either way (and no answer there without a copy: HNSW)."""
    q = unit_vectors(1, seed=5)[0]
    for text in ("B-P4", "boiler valve", "A-P2 pump"):
        for mode in ("keyword", "hybrid"):
            rows = store.keyword_leg("kb", text, k=3, mode=mode)
            assert rows is not None
            here = store.words_in_memory("kb", q, rows, k=3, mode=mode, include_text=True, max_floats=10**9)
            there = store.query_words("kb", q, text, k=3, mode=mode)
            if store._memory.budget == 0:
                assert here is None
            else:
                assert here == there
            assert (
                store.words_in_memory("kb", q, rows, k=3, mode=mode, include_text=True, max_floats=1) is None
            )


@pytest.mark.anyio
async def test_a_corpus_without_its_keyword_index_answers_dense_and_says_so(tmp_path: Path) -> None:
    """Until the index of an older corpus is built (or if it cannot be), keyword and hybrid
    queries are answered by dense search, and the mode used says so."""
    threads = WorkerThreads(1, "test-read")
    try:
        with CorpusStore(tmp_path / "rag") as s:
            s.create_corpus("kb", embedding_model="m", dim=16)
            s.add_document("kb", doc("a", 4), unit_vectors(4, seed=1))
            corpus = LocalCorpus(s, "kb", threads, embedding_model="m")
            q = unit_vectors(1, seed=5)[0]
            for mode in ("keyword", "hybrid"):
                leg = await corpus.keyword_leg("A-P1", k=2, mode=mode, where=None)
                hits, _, used = await corpus.search(
                    q, k=2, where=None, include_text=True, text="A-P1", mode=mode, leg=leg
                )
                assert used == mode and "a-1" in [h.chunk_id for h in hits]
            db = sqlite3.connect(s.root / "ledger.sqlite3")
            db.execute("DELETE FROM keyword_corpora")  # as a corpus from before the index
            db.commit()
            db.close()
            for mode in ("keyword", "hybrid"):
                leg = await corpus.keyword_leg("A-P1", k=2, mode=mode, where=None)
                assert leg.rows is None
                hits, _, used = await corpus.search(
                    q, k=2, where=None, include_text=True, text="A-P1", mode=mode, leg=leg
                )
                assert used == "dense" and [h.chunk_id for h in hits] == [
                    h.chunk_id for h in s.query("kb", q, k=2)
                ]
                _, _, used = await corpus.search(
                    q, k=2, where=None, include_text=True, text="A-P1", mode=mode
                )
                assert used == "dense"
    finally:
        threads.close()
