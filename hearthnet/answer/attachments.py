"""Documents attached to one chat session: kept beside the session, searched with the corpora.

``answer.attach`` reads a document through this node's RAG service (``rag.read_document``: the
ingest's killable reader and chunker, nothing stored there), embeds its chunks with the model
the node's corpora use (``embed.text``) and keeps chunks and vectors in the session store
(``answer.sqlite3``, tables ``attachments`` and ``attached_chunks``, deleted with their session
by the database's cascade).  They never join a corpus and no capability serves them to a peer.
Each ask in the session searches them exactly (a cosine over at most ``MAX_ATTACHED_CHUNKS``
vectors) beside the corpora: they come back as one more result, ``ATTACHED``, whose hits are
cited like any other.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np

from hearthnet.answer.hits import Hit
from hearthnet.answer.retrieve import CorpusResult
from hearthnet.blobs.cid import blob_cid
from hearthnet.bus.api import BusAPI
from hearthnet.contracts.embed import MAX_TEXTS, Embedder
from hearthnet.contracts.reading import ReadDocument, read_document
from hearthnet.errors import BusError, CapacityExceeded
from hearthnet.runtime.sqlite_tx import transaction

__all__ = [
    "ATTACHED",
    "ATTACHMENT_SCHEMA",
    "MAX_ATTACHED_CHUNKS",
    "MAX_ATTACHMENTS",
    "MAX_NODE_ATTACHED_CHUNKS",
    "AttachedChunk",
    "Attachments",
    "add_attachment",
    "attached_chunks",
    "attachments_of",
]

ATTACHED = "chat:attached"
"""The name a chat's attachments answer under in ``meta.corpora`` and as their hits' ``corpus``
(not a corpus name: it cannot collide with one)."""
MAX_ATTACHMENTS = 8
"""Documents one session may hold."""
MAX_ATTACHED_CHUNKS = 4000
"""Chunks of all a session's documents together (searched exactly at each ask)."""
MAX_NODE_ATTACHED_CHUNKS = 100_000
"""Chunks of every session's documents together on this node (about 2 KB each, vector and text)."""

ATTACHMENT_SCHEMA = """
CREATE TABLE IF NOT EXISTS attachments (
    id TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    title TEXT NOT NULL,
    pages INTEGER NOT NULL,
    model TEXT NOT NULL,
    chunks INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, id)
);
CREATE TABLE IF NOT EXISTS attached_chunks (
    session_id TEXT NOT NULL,
    attachment_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    page INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL,
    FOREIGN KEY (session_id, attachment_id) REFERENCES attachments(session_id, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS attached_chunks_by_session ON attached_chunks (session_id);
"""


@dataclass(frozen=True)
class AttachedChunk:
    attachment_id: str
    name: str
    title: str
    model: str
    chunk_id: str
    page: int
    text: str
    vector: bytes


def attachments_of(db: sqlite3.Connection, session: str) -> list[dict[str, Any]]:
    """The session's attachments, oldest first (the caller holds the store's lock)."""
    rows = db.execute(
        "SELECT id, name, title, pages, chunks, created_ms FROM attachments WHERE session_id = ? "
        "ORDER BY created_ms, id",
        (session,),
    ).fetchall()
    return [
        {"id": i, "name": n, "title": t, "pages": p, "chunks": c, "created_ms": ms}
        for i, n, t, p, c, ms in rows
    ]


def add_attachment(
    db: sqlite3.Connection,
    session: str,
    attachment_id: str,
    doc: ReadDocument,
    name: str,
    vectors: np.ndarray,
) -> dict[str, Any]:
    """Store one read and embedded document in ``session`` (created if new, titled by the
    document until its first question); ``capacity_exceeded`` over the session's bounds."""
    now = int(time.time() * 1000)
    with transaction(db):
        db.execute(
            "INSERT INTO sessions (id, title, created_ms, updated_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET updated_ms = excluded.updated_ms",
            (session, " ".join(name.split())[:200], now, now),
        )
        held = attachments_of(db, session)
        if len(held) >= MAX_ATTACHMENTS:
            raise CapacityExceeded(f"a chat holds at most {MAX_ATTACHMENTS} documents")
        chunks = sum(a["chunks"] for a in held)
        if chunks + len(doc.chunks) > MAX_ATTACHED_CHUNKS:
            raise CapacityExceeded(
                f"a chat's documents hold at most {MAX_ATTACHED_CHUNKS:,} chunks together; this one "
                f"has {len(doc.chunks):,} and the chat {chunks:,} already"
            )
        (on_node,) = db.execute("SELECT COUNT(*) FROM attached_chunks").fetchone()
        if on_node + len(doc.chunks) > MAX_NODE_ATTACHED_CHUNKS:
            raise CapacityExceeded(
                f"this node keeps at most {MAX_NODE_ATTACHED_CHUNKS:,} chunks of chats' documents and "
                f"holds {on_node:,}: delete chats you no longer need"
            )
        db.execute("DELETE FROM attachments WHERE session_id = ? AND id = ?", (session, attachment_id))
        db.execute(
            "INSERT INTO attachments (id, session_id, name, title, pages, model, chunks, created_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (attachment_id, session, name, doc.title, doc.pages, doc.embedding_model, len(doc.chunks), now),
        )
        db.executemany(
            "INSERT INTO attached_chunks (session_id, attachment_id, chunk_id, page, text, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (session, attachment_id, c.chunk_id, c.page, c.text, vectors[i].astype(np.float32).tobytes())
                for i, c in enumerate(doc.chunks)
            ],
        )
    return {
        "id": attachment_id,
        "name": name,
        "title": doc.title,
        "pages": doc.pages,
        "chunks": len(doc.chunks),
        "created_ms": now,
    }


def attached_chunks(db: sqlite3.Connection, session: str) -> list[AttachedChunk]:
    """Every chunk the session's documents hold, with its vector (the caller holds the lock)."""
    rows = db.execute(
        "SELECT a.id, a.name, a.title, a.model, c.chunk_id, c.page, c.text, c.vector "
        "FROM attached_chunks c JOIN attachments a ON a.session_id = c.session_id AND a.id = c.attachment_id "
        "WHERE c.session_id = ? ORDER BY a.created_ms, a.id, c.rowid",
        (session,),
    ).fetchall()
    return [AttachedChunk(*row) for row in rows]


InStore = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]
"""Runs a function on the session store's database in its one worker thread, under its lock."""


class Attachments:
    """Attaching documents to a session, and searching them for a question of that session."""

    def __init__(self, bus: BusAPI, in_store: InStore, *, embed_timeout: float) -> None:
        self._bus = bus
        self._in_store = in_store
        self._embed_timeout = embed_timeout

    async def attach(self, session: str, name: str, data: bytes, *, deadline: float) -> dict[str, Any]:
        """Read, embed and keep ``data`` in ``session``; the attachment as listed."""
        held = await self._in_store(lambda db: attachments_of(db, session))
        if len(held) >= MAX_ATTACHMENTS:  # before any reading: the store says it again at the end
            raise CapacityExceeded(f"a chat holds at most {MAX_ATTACHMENTS} documents")
        doc = await read_document(self._bus, data, name, timeout=max(1.0, deadline - anyio.current_time()))
        embedder = Embedder(self._bus, doc.embedding_model, self._embed_timeout)
        texts = [c.text for c in doc.chunks]
        parts = [
            (await embedder.embed_patiently(texts[i : i + MAX_TEXTS])).vectors
            for i in range(0, len(texts), MAX_TEXTS)
        ]
        vectors = np.concatenate(parts) if parts else np.zeros((0, 1), dtype=np.float32)
        attachment_id = "att-" + blob_cid(data).rsplit(":", 1)[-1][:16]
        return dict(
            await self._in_store(lambda db: add_attachment(db, session, attachment_id, doc, name, vectors))
        )

    async def search(self, session: str, question: str, *, k: int, timeout: float) -> CorpusResult | None:
        """The session's ``k`` chunks closest to ``question`` (``None``: it holds no document),
        within ``timeout`` seconds (the retrieval's deadline, as for a corpus)."""
        started = time.perf_counter()
        result = CorpusResult(ATTACHED, node=self._bus.node_id, status="timeout", code="timeout")
        with anyio.move_on_after(timeout):
            chunks: list[AttachedChunk] = await self._in_store(lambda db: attached_chunks(db, session))
            if not chunks:
                return None
            model = chunks[0].model
            try:
                embedded = await Embedder(self._bus, model, self._embed_timeout).embed([question])
            except BusError as exc:
                result.status = "timeout" if exc.code == "timeout" else "unavailable"
                result.code = exc.code
            else:
                same = [c for c in chunks if c.model == model]
                result.hits = nearest(embedded.vectors[0], same, k, self._bus.node_id)
                result.status, result.code = "ok", ""
        result.ms = (time.perf_counter() - started) * 1000
        return result


def nearest(query: np.ndarray, chunks: Sequence[AttachedChunk], k: int, node: str) -> list[Hit]:
    """The ``k`` chunks of highest cosine to ``query`` (vectors are normalised), best first."""
    if not chunks:
        return []
    matrix = np.stack([np.frombuffer(c.vector, dtype=np.float32) for c in chunks])
    scores = matrix @ query.astype(np.float32)
    order = np.argsort(-scores, kind="stable")[:k]
    return [
        Hit(
            chunk_id=chunks[i].chunk_id,
            text=chunks[i].text,
            score=float(scores[i]),
            corpus=ATTACHED,
            node=node,
            embedding_model=chunks[i].model,
            rank=rank,
            metadata={
                "doc_title": chunks[i].title,
                "doc_filename": chunks[i].name,
                "page": chunks[i].page,
                "attachment": chunks[i].attachment_id,
            },
        )
        for rank, i in enumerate(order.tolist(), start=1)
    ]
