"""A document replaced by its new version in one store commit (``DocumentSource.replaces``, the
watched folders' changed file): a query run while the new version is written sees only the old,
one run while the old is taken out sees only the new; never neither, never both.  On a real
embedded ChromaDB, both query paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hearthnet.services.rag.store import CorpusStore, DocumentSource
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors

CORPUS = "folder"


@pytest.fixture(params=["exact", "hnsw"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0 if request.param == "hnsw" else 30_000)
    s.create_corpus(CORPUS, embedding_model="m", dim=16)
    yield s
    s.close()


def seen(store: CorpusStore, probe: np.ndarray) -> set[str]:
    """The documents a query (and the listing) sees now."""
    hits = store.query(CORPUS, probe, k=10)
    listed = {d["doc_cid"] for d in store.list_documents(CORPUS, after="", limit=100)[0]}
    found = {str(h.metadata["doc_cid"]) for h in hits}
    assert found <= listed
    return listed


def test_a_new_version_replaces_the_old_in_one_commit(store: CorpusStore, monkeypatch: Any) -> None:
    old, new = "blake3:old", "blake3:new"
    vecs = unit_vectors(3, seed=1)
    store.add_document(CORPUS, fake_chunks(old, 3), vecs)
    probe = vecs[0]
    during_write: list[set[str]] = []
    during_purge: list[set[str]] = []
    write, delete = store._write_batch, store._delete_batch

    def write_batch(col: Any, ids: list[str], *rest: Any) -> None:
        during_write.append(seen(store, probe))  # the new version is being written: not visible yet
        write(col, ids, *rest)

    def delete_batch(col: Any, ids: list[str]) -> None:
        during_purge.append(seen(store, probe))  # the old one's chunks go: it is hidden already
        delete(col, ids)

    monkeypatch.setattr(store, "_write_batch", write_batch)
    monkeypatch.setattr(store, "_delete_batch", delete_batch)
    source = DocumentSource(filename="a.txt", replaces=old)
    store.add_documents(CORPUS, [(fake_chunks(new, 3), unit_vectors(3, seed=2), source)])
    assert during_write == [{old}]
    assert during_purge == [{new}]
    assert seen(store, probe) == {new}
    assert not store.has_document(CORPUS, old)
    assert store.pending_deletions() == [(CORPUS, old)]  # its rag.document.deleted is owed


def test_replacing_in_the_personal_corpus_owes_no_announcement(store: CorpusStore) -> None:
    store.create_corpus("personal", embedding_model="m", dim=16)
    store.add_document("personal", fake_chunks("blake3:a", 2), unit_vectors(2, seed=3))
    source = DocumentSource(replaces="blake3:a")
    store.add_document("personal", fake_chunks("blake3:b", 2), unit_vectors(2, seed=4), source=source)
    assert [d["doc_cid"] for d in store.list_documents("personal", after="", limit=10)[0]] == ["blake3:b"]
    assert store.pending_deletions() == []  # personal is never announced, nor its deletions


def test_replacing_a_document_that_is_not_there_only_adds(store: CorpusStore) -> None:
    source = DocumentSource(replaces="blake3:missing")
    store.add_document(CORPUS, fake_chunks("blake3:c", 2), unit_vectors(2, seed=5), source=source)
    assert seen(store, unit_vectors(1, seed=5)[0]) == {"blake3:c"}
    assert store.pending_deletions() == []


def test_a_failed_write_leaves_the_old_version(store: CorpusStore, monkeypatch: Any) -> None:
    store.add_document(CORPUS, fake_chunks("blake3:d", 2), unit_vectors(2, seed=6))

    def broken(col: Any, ids: list[str], *rest: Any) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(store, "_write_batch", broken)
    with pytest.raises(OSError):
        source = DocumentSource(replaces="blake3:d")
        store.add_document(CORPUS, fake_chunks("blake3:e", 2), unit_vectors(2, seed=7), source=source)
    assert seen(store, unit_vectors(1, seed=6)[0]) == {"blake3:d"}
