"""A document's title and metadata changed in place (``CorpusStore.update_document``), on a real
embedded ChromaDB: every query path sees the new values, the vectors stay, a kill after the ledger's
transaction is finished at the next open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.rag.store import CorpusStore
from hearthnet.services.rag.store.update import chunk_change
from hearthnet.services.rag.store.write import DocumentSource
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors


@pytest.fixture(params=["exact", "hnsw"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0 if request.param == "hnsw" else 30_000)
    yield s
    s.close()


def _with_meta(doc_cid: str, n: int, **meta: Any) -> list[Any]:
    chunks = fake_chunks(doc_cid, n)
    for c in chunks:
        c.metadata.update(meta)
    return chunks


def test_an_update_changes_title_and_metadata_everywhere_and_keeps_the_vectors(store: CorpusStore) -> None:
    store.create_corpus("kb", embedding_model="m", dim=16)
    va, vb = unit_vectors(5, seed=1), unit_vectors(5, seed=2)
    store.add_document("kb", _with_meta("doc-a", 5, year=2020, topic="old"), va)
    store.add_document("kb", _with_meta("doc-b", 5, year=2021), vb)
    before = store.document_chunks("kb", "doc-a")
    assert before is not None

    done = store.updates.update_document(
        "kb", "doc-a", metadata={"year": 2024, "topic": None, "k": "v"}, title="New"
    )
    assert done is not None and done.changed
    assert (done.title, done.metadata) == ("New", {"year": 2024, "k": "v"})
    doc = store.document("kb", "doc-a")
    assert doc is not None and (doc["title"], doc["metadata"]) == ("New", {"year": 2024, "k": "v"})
    listed, _ = store.list_documents("kb")
    assert {d["doc_cid"]: d["title"] for d in listed}["doc-a"] == "New"

    hits = store.query("kb", va[0], k=10, where={"year": {"$gte": 2024}})
    assert {h.metadata["doc_cid"] for h in hits} == {"doc-a"} and len(hits) == 5
    assert all(h.metadata["doc_title"] == "New" and "topic" not in h.metadata for h in hits)
    assert all(h.metadata["page"] >= 1 and h.metadata["chunk_index"] >= 0 for h in hits)
    assert store.query("kb", va[0], k=10, where={"topic": "old"}) == []
    words = store.query_words("kb", va[0], "doc-a", k=10, mode="keyword", where={"k": "v"})
    assert {h.metadata["doc_cid"] for h in words} == {"doc-a"}
    assert store.metadata_keys("kb") is not None and "k" in (store.metadata_keys("kb") or ())

    after = store.document_chunks("kb", "doc-a")
    assert after is not None
    assert after[0] == before[0] and after[1] == before[1]
    np.testing.assert_array_equal(after[3], before[3])  # not re-embedded
    assert store.updates.pending_updates() == []

    same = store.updates.update_document("kb", "doc-a", metadata={"year": 2024}, title="New")
    assert same is not None and not same.changed
    assert store.updates.update_document("kb", "doc-zzz", title="x") is None


def test_a_new_file_name_is_what_every_chunk_and_the_listing_name(store: CorpusStore) -> None:
    """A watched file renamed: its chunks' ``doc_filename`` (what citations name and filters
    match) and the ledger's file name change together; the title, metadata and vectors stay."""
    store.create_corpus("kb", embedding_model="m", dim=16)
    va = unit_vectors(4, seed=4)
    store.add_document(
        "kb", _with_meta("doc-a", 4, year=2020), va, source=DocumentSource(filename="scan001.pdf")
    )
    before = store.document_chunks("kb", "doc-a")
    done = store.updates.update_document("kb", "doc-a", filename="boiler manual.pdf")
    assert done is not None and done.changed and done.filename == "boiler manual.pdf" and done.renamed
    doc = store.document("kb", "doc-a")
    assert doc is not None and doc["filename"] == "boiler manual.pdf" and doc["metadata"] == {"year": 2020}
    listed, _ = store.list_documents("kb")
    assert listed[0]["filename"] == "boiler manual.pdf" and listed[0]["title"] == "DOC-A"
    hits = store.query("kb", va[0], k=10, where={"doc_filename": "boiler manual.pdf"})
    assert len(hits) == 4 and all(h.metadata["doc_title"] == "DOC-A" for h in hits)
    assert store.query("kb", va[0], k=10, where={"doc_filename": "scan001.pdf"}) == []
    words = store.query_words(
        "kb", va[0], "doc-a", k=10, mode="keyword", where={"doc_filename": "boiler manual.pdf"}
    )
    assert len(words) == 4
    after = store.document_chunks("kb", "doc-a")
    assert before is not None and after is not None
    np.testing.assert_array_equal(after[3], before[3])  # not re-embedded
    again = store.updates.update_document("kb", "doc-a", filename="boiler manual.pdf")
    assert again is not None and not again.changed
    other = store.updates.update_document("kb", "doc-a", metadata={"year": 2021})
    assert other is not None and other.changed and not other.renamed  # its event names no file

    # a title that was only the file's name (the document named none) follows the file
    named = _with_meta("doc-b", 2, doc_title="paper")
    store.add_document("kb", named, unit_vectors(2, seed=5), source=DocumentSource(filename="paper.pdf"))
    done = store.updates.update_document("kb", "doc-b", filename="shinyama naacl.pdf")
    assert done is not None and done.title == "shinyama naacl"
    hits = store.query("kb", va[0], k=10, where={"doc_cid": "doc-b"})
    assert {h.metadata["doc_title"] for h in hits} == {"shinyama naacl"}
    kept = store.updates.update_document("kb", "doc-b", filename="x.pdf", title="Paraphrases")
    assert kept is not None and kept.title == "Paraphrases"  # a title given is the title


def test_an_update_to_be_announced_stays_owed_until_it_is(store: CorpusStore) -> None:
    store.create_corpus("kb", embedding_model="m", dim=16)
    store.add_document("kb", fake_chunks("doc-a", 3), unit_vectors(3))
    store.updates.update_document("kb", "doc-a", title="T", announce=True)
    assert store.updates.pending_updates() == [("kb", "doc-a")]
    store.updates.update_announced("kb", "doc-a")
    assert store.updates.pending_updates() == []


def test_bad_metadata_is_refused_and_nothing_changes(store: CorpusStore) -> None:
    store.create_corpus("kb", embedding_model="m", dim=16)
    store.add_document("kb", _with_meta("doc-a", 3, year=2020), unit_vectors(3))
    for bad in ({"page": 3}, {"hn_x": 1}, {"bad key": 1}, {"x": float("nan")}, {"x": [1]}):
        with pytest.raises(BadRequest):
            store.updates.update_document("kb", "doc-a", metadata=bad)
    with pytest.raises(BadRequest, match="at most 32"):
        store.updates.update_document("kb", "doc-a", metadata={f"f{i}": i for i in range(40)})
    doc = store.document("kb", "doc-a")
    assert doc is not None and doc["metadata"] == {"year": 2020}


def test_an_update_cut_short_after_the_ledger_is_finished_at_the_next_open(tmp_path: Path) -> None:
    """The ledger's transaction is the update's point of no return: chunks still holding the old
    values (a kill before ChromaDB was written) get the new ones when the store opens again."""
    root = tmp_path / "rag"
    vecs = unit_vectors(30, seed=3)
    with CorpusStore(root, batch_size=7) as s:
        s.create_corpus("kb", embedding_model="m", dim=16)
        s.add_document("kb", _with_meta("doc-a", 30, year=2020), vecs)
        new = {"year": 2030}
        # what update_document commits before it writes ChromaDB, and no more: as if killed there
        assert s._ledger.update_metadata(
            "kb",
            "doc-a",
            title="After",
            metadata=new,
            filename=None,
            change=chunk_change("After", new),
            announce=True,
        )
    with CorpusStore(root, exact_max_chunks=0) as s:
        hits = s.query("kb", vecs[0], k=30, where={"year": 2030})
        assert len(hits) == 30 and all(h.metadata["doc_title"] == "After" for h in hits)
        assert s.updates.pending_updates() == [("kb", "doc-a")]  # its announcement is still owed
