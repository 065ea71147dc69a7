"""A corpus of the store as ``rag.query`` searches it: answering like the store, on the event loop
when its in-memory copy is small and unfiltered, in a read thread otherwise."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.search import choice
from hearthnet.services.rag.store import CorpusStore, LocalCorpus
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors

MODEL = "test-model"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CorpusStore]:
    with CorpusStore(tmp_path / "rag") as s:
        s.create_corpus("kb", embedding_model=MODEL, dim=16)
        for doc, seed in (("a", 1), ("b", 2)):
            s.add_document(
                "kb", fake_chunks(doc, 6, language="de" if doc == "b" else "en"), unit_vectors(6, seed=seed)
            )
        yield s


@pytest.mark.anyio
async def test_a_store_corpus_answers_like_the_store(store: CorpusStore) -> None:
    threads = WorkerThreads(1, "test-read")
    try:
        corpus = LocalCorpus(store, "kb", threads, embedding_model=MODEL)
        assert corpus.name == "kb" and corpus.embedding_model == MODEL
        query = unit_vectors(6, seed=2)[3]
        hits, keys, used = await corpus.search(query, k=3, where=None, include_text=True)
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in store.query("kb", query, k=3)]
        assert hits[0].chunk_id == "b-3" and hits[0].text == "chunk 3 of b"
        assert keys is None and used == "dense"
    finally:
        threads.close()


@pytest.mark.anyio
async def test_a_small_unfiltered_search_runs_on_the_loop_a_filtered_one_in_a_thread(
    store: CorpusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = WorkerThreads(1, "test-read")
    loop_thread = threading.get_ident()
    seen: list[bool] = []
    real_query = store.query

    def query(*args: object, **kw: object) -> object:
        seen.append(threading.get_ident() == loop_thread)
        return real_query(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "query", query)
    try:
        corpus = LocalCorpus(store, "kb", threads, embedding_model=MODEL)
        vector = unit_vectors(1, seed=9)[0]
        store.warm_exact()
        hits, keys, _ = await corpus.search(vector, k=2, where=None, include_text=True)
        assert len(hits) == 2 and keys is None and seen == []  # the in-memory copy, on the loop
        hits, keys, _ = await corpus.search(vector, k=2, where={"language": "de"}, include_text=True)
        assert {h.metadata["doc_cid"] for h in hits} == {"b"} and keys is not None and "language" in keys
        assert seen == [False]  # filtered: in a read thread
        monkeypatch.setattr(choice, "INLINE_SEARCH_FLOATS", 16 * 12 - 1)  # one float too many
        await corpus.search(vector, k=2, where=None, include_text=True)
        assert seen == [False, False]
    finally:
        threads.close()


def test_the_choice_is_made_in_one_place() -> None:
    async def main() -> list[str]:
        threads = WorkerThreads(1, "test-choice")
        try:
            here = await choice.search_here_or_in_thread(lambda _floats: "here", lambda: "thread", threads)
            there = await choice.search_here_or_in_thread(lambda _floats: None, lambda: "thread", threads)
            return [here, there]
        finally:
            threads.close()

    assert anyio.run(main) == ["here", "thread"]
