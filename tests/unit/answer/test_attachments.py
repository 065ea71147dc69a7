"""Documents attached to one chat session (``answer.attach``), on one in-process node with the real
MiniLM, ChromaDB and RAG: read through ``rag.read_document`` (the ingest's killable reader),
kept beside the session, searched with the corpora for that session's questions only, cited like
any other passage, deleted with the session (and when the store drops the session), bounded.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hearthnet.answer import attachments
from hearthnet.answer.attachments import (
    ATTACHED,
    MAX_ATTACHED_CHUNKS,
    MAX_ATTACHMENTS,
    AttachedChunk,
    add_attachment,
    nearest,
)
from hearthnet.answer.sessions import SessionStore
from hearthnet.contracts.reading import MAX_READ_BYTES, ReadChunk, ReadDocument
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound, Unauthorized
from hearthnet.services.embedding.onnx_backend import OnnxModel
from tests.answer_harness import DEMO, answer_node
from tests.shared_data import PDF_DIR

PAPER = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
QUESTION = "What does Unrestricted Relation Discovery discover from texts?"


@pytest.mark.anyio
async def test_an_attached_pdf_is_searched_for_its_session_only_and_deleted_with_it(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        out = await n.call("answer.attach", session="s1", name=PAPER.name, data=PAPER.read_bytes())
        attached = out["attachment"]
        assert attached["name"] == PAPER.name and attached["pages"] == 8 and attached["chunks"] > 10
        corpora = (await n.call("rag.list_corpora"))["corpora"]
        assert [(c["name"], c["docs"]) for c in corpora] == [("house", 1)]  # no corpus gained it

        asked = (await n.ask(QUESTION, session="s1")).output
        assert asked["meta"]["corpora"][ATTACHED]["status"] == "ok"
        assert asked["meta"]["corpora"]["house"]["status"] == "ok"  # searched together
        cited = [s for s in asked["sources"] if s["cited"]]
        assert cited and {s["file"] for s in cited} == {PAPER.name}
        assert all(s["corpus"] == ATTACHED and s["node"] == n.bus.node_id for s in cited)
        assert f"[{PAPER.name}#{cited[0]['chunk_id']}]" in asked["answer"]

        other = (await n.ask(QUESTION, session="s2")).output  # another session never sees it
        assert ATTACHED not in other["meta"]["corpora"]
        assert all(s["file"] != PAPER.name for s in other["sources"])

        got = await n.call("answer.session.get", session="s1")
        assert [a["name"] for a in got["attachments"]] == [PAPER.name]
        kept = got["turns"][0]["sources"]  # the turn keeps the passages it cited, to show them again
        assert [x["chunk_id"] for x in kept] == [x["chunk_id"] for x in cited]
        assert kept[0]["text"] == cited[0]["text"] and kept[0]["page"] == cited[0]["page"]
        assert got["title"] == QUESTION  # its first question names it, as any session
        await n.call("answer.session.delete", session="s1")
        with sqlite3.connect(tmp_path / "answer.sqlite3") as db:
            assert db.execute("SELECT COUNT(*) FROM attached_chunks").fetchone() == (0,)
            assert db.execute("SELECT COUNT(*) FROM attachments").fetchone() == (0,)
        again = (await n.ask(QUESTION, session="s1")).output
        assert ATTACHED not in again["meta"]["corpora"]


@pytest.mark.anyio
async def test_no_rag_searches_no_corpus_but_still_the_sessions_attachments(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """``no_rag`` is about corpora: a member who may search none (the web UI asks for them with
    ``no_rag``) still has the documents they attached to the chat searched."""
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        await n.call("answer.attach", session="s1", name=PAPER.name, data=PAPER.read_bytes())
        asked = (await n.ask(QUESTION, session="s1", no_rag=True)).output
        assert set(asked["meta"]["corpora"]) == {ATTACHED}  # not the corpus "house"
        assert asked["meta"]["rag"] == "used" and "skipped" not in asked["meta"]
        cited = [s for s in asked["sources"] if s["cited"]]
        assert cited and {s["file"] for s in cited} == {PAPER.name}

        alone = (await n.ask(QUESTION, session="s2", no_rag=True)).output  # nothing attached
        assert alone["meta"]["corpora"] == {} and alone["meta"]["skipped"] == "no_rag"
        assert alone["sources"] == []


@pytest.mark.anyio
async def test_an_answer_cached_before_an_attachment_is_not_served_after_it(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        first = (await n.ask(QUESTION, session="s1")).output
        assert ATTACHED not in first["meta"]["corpora"]
        await n.call("answer.attach", session="s1", name="notes.md", data=b"# Notes\n\n" + b"relations " * 50)
        second = (await n.ask(QUESTION, session="s1")).output
        assert second["meta"]["cache"] == "miss" and ATTACHED in second["meta"]["corpora"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"name": "a.txt", "data": b""}, "input.data"),
        ({"name": "a.txt", "data": "text, not bytes"}, "input.data"),
        ({"name": "", "data": b"hello"}, "input.name"),
        ({"name": "bad\nname.txt", "data": b"hello"}, "input.name"),
        ({"name": "big.txt", "data": b"x" * (MAX_READ_BYTES + 1)}, "input.data"),
        ({"name": "a.txt", "data": b"hi", "corpus": "house"}, "corpus"),
    ],
)
async def test_a_bad_attachment_input_is_refused_naming_the_field(
    tmp_path: Path, minilm: OnnxModel, fields: dict[str, object], says: str
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        with pytest.raises(BadRequest, match=says):
            await n.call("answer.attach", session="s1", **fields)
        with pytest.raises(NotFound):  # nothing was made
            await n.call("answer.session.get", session="s1")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("corrupt_header_only.pdf", "not a readable PDF|damaged|broken"),
        ("encrypted_password_openpassword.pdf", "password"),
        ("scanned_image_only_no_text.pdf", "no text layer"),
    ],
)
async def test_a_broken_document_is_the_readers_error_and_nothing_is_kept(
    tmp_path: Path, minilm: OnnxModel, name: str, says: str
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        with pytest.raises(BadRequest, match=says):
            await n.call("answer.attach", session="s1", name=name, data=(PDF_DIR / name).read_bytes())
        with pytest.raises(NotFound):
            await n.call("answer.session.get", session="s1")


@pytest.mark.anyio
async def test_rag_read_document_serves_this_node_only(tmp_path: Path, minilm: OnnxModel) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        (reg,) = [r for r in n.rag.registrations() if r.descriptor.name == "rag.read_document"]
        assert reg.descriptor.local_only
        text = (DEMO / "heating_handbook.pdf").read_bytes()
        out = await n.call("rag.read_document", data=text, filename="heating_handbook.pdf")
        assert out["pages"] >= 1 and out["chunks"] and out["embedding_model"]
        assert {c["page"] for c in out["chunks"]} <= set(range(1, out["pages"] + 1))
        assert (await n.call("rag.list_corpora"))["corpora"] == []  # nothing stored

        class Remote:
            is_local = False

        with pytest.raises(Unauthorized):
            await reg.handler(Remote())  # type: ignore[arg-type]


def _doc(chunks: int, model: str = "m") -> ReadDocument:
    return ReadDocument(
        title="T",
        pages=1,
        language="en",
        embedding_model=model,
        chunks=tuple(ReadChunk(f"c{i}", f"text {i}", 1) for i in range(chunks)),
    )


def test_the_store_bounds_a_session_and_its_cascade_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path / "a.sqlite3", max_sessions=2, max_turns=10)
    try:
        vectors = np.ones((3, 4), dtype=np.float32)
        for i in range(MAX_ATTACHMENTS):
            store.run(lambda db, i=i: add_attachment(db, "s1", f"att-{i}", _doc(3), f"f{i}.txt", vectors))
        with pytest.raises(CapacityExceeded, match=f"at most {MAX_ATTACHMENTS} documents"):
            store.run(lambda db: add_attachment(db, "s1", "att-x", _doc(3), "x.txt", vectors))
        big = np.ones((MAX_ATTACHED_CHUNKS + 1, 4), dtype=np.float32)
        with pytest.raises(CapacityExceeded, match="chunks together"):
            store.run(lambda db: add_attachment(db, "s2", "att-y", _doc(MAX_ATTACHED_CHUNKS + 1), "y", big))
        assert len(store.get("s1")["attachments"]) == MAX_ATTACHMENTS
        monkeypatch.setattr(attachments, "MAX_NODE_ATTACHED_CHUNKS", 3 * MAX_ATTACHMENTS + 2)
        with pytest.raises(CapacityExceeded, match="delete chats you no longer need"):
            store.run(lambda db: add_attachment(db, "s2", "att-z", _doc(3), "z.txt", vectors))
        monkeypatch.undo()
        # the store keeps its 2 most recently used sessions: s1, pushed out, takes its documents along
        store.append("s2", question="q", answer="a", cited=[], mode="extractive")
        store.append("s3", question="q", answer="a", cited=[], mode="extractive")
        with pytest.raises(NotFound):
            store.get("s1")
        assert store.run(lambda db: db.execute("SELECT COUNT(*) FROM attached_chunks").fetchone()) == (0,)
    finally:
        store.close()


def test_nearest_ranks_by_cosine_best_first() -> None:
    def chunk(i: int, v: list[float]) -> AttachedChunk:
        return AttachedChunk("a", "f.pdf", "T", "m", f"c{i}", i, f"t{i}", np.array(v, np.float32).tobytes())

    chunks = [chunk(1, [1, 0]), chunk(2, [0.6, 0.8]), chunk(3, [0, 1])]
    hits = nearest(np.array([0, 1], np.float32), chunks, 2, "node")
    assert [h.chunk_id for h in hits] == ["c3", "c2"]
    assert [h.rank for h in hits] == [1, 2] and hits[1].score == pytest.approx(0.8, abs=1e-6)
    assert hits[0].file == "f.pdf" and hits[0].page == 3 and hits[0].corpus == ATTACHED


def test_a_store_from_before_kept_sources_is_opened_and_keeps_its_turns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:  # the schema before turns kept their sources
        db.executescript(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT NOT NULL, created_ms INTEGER NOT NULL,"
            " updated_ms INTEGER NOT NULL);"
            "CREATE TABLE turns (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,"
            " seq INTEGER NOT NULL, question TEXT NOT NULL, answer TEXT NOT NULL, cited TEXT NOT NULL,"
            " mode TEXT NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (session_id, seq));"
            "INSERT INTO sessions VALUES ('old', 'Old question', 1, 1);"
            "INSERT INTO turns VALUES ('old', 1, 'Old question', 'Old answer', '[]', 'extractive', 1);"
        )
    store = SessionStore(path, max_sessions=10, max_turns=10)
    try:
        source = {"chunk_id": "c1", "text": "a passage", "file": "f.pdf", "page": 2, "cited": True}
        store.append(
            "old", question="New question", answer="New [f.pdf#c1]", cited=["c1"], mode="x", sources=[source]
        )
        turns = store.get("old")["turns"]
        assert [t["sources"] for t in turns] == [[], [source]]
        assert store.get("old")["title"] == "Old question"  # a session with turns keeps its title
    finally:
        store.close()
