"""CorpusStore against a real ChromaDB server (`chroma run`) on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from hearthnet.errors import NotFound
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.store import CorpusStore, collection_name

STARTUP_DEADLINE_S = 60.0


def _chroma_binary() -> str | None:
    local = Path(sys.executable).parent / "chroma"
    return str(local) if local.exists() else shutil.which("chroma")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _chroma_binary()
    if binary is None:
        pytest.skip("the `chroma` CLI is not installed (it ships with the chromadb package)")
    data = tmp_path_factory.mktemp("chroma-server")
    port = _free_port()
    log = (data / "server.log").open("w")
    proc = subprocess.Popen(
        [binary, "run", "--path", str(data / "db"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    try:
        with httpx.Client(timeout=2.0) as client:
            while True:
                if proc.poll() is not None:
                    pytest.fail(
                        f"chroma run exited with {proc.returncode}: {(data / 'server.log').read_text()}"
                    )
                try:
                    if client.get(f"{url}/api/v2/heartbeat").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"chroma server did not answer its heartbeat within {STARTUP_DEADLINE_S}s")
                # Block on the process for a moment instead of sleeping: returns early if it dies.
                try:
                    proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_add_and_query_through_chroma_server(chroma_server: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(30, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    chunks = [
        Chunk(
            f"srv-{i}",
            f"server chunk {i}",
            {"doc_cid": "srv", "page": 1 + i // 10, "chunk_index": i, "language": "en"},
        )
        for i in range(30)
    ]
    with CorpusStore(tmp_path / "ledger", server_url=chroma_server, batch_size=8) as store:
        store.create_corpus("ab", embedding_model="m", dim=32)
        store.add_document("ab", chunks, vecs)
        hits = store.query("ab", vecs[17], k=3)
        assert hits[0].chunk_id == "srv-17" and hits[0].text == "server chunk 17"
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        filtered = store.query("ab", vecs[17], k=30, where={"page": 3})
        assert len(filtered) == 10 and all(h.metadata["page"] == 3 for h in filtered)
        assert store.info("ab").chunks == 30
        assert store.delete_document("ab", "srv") == 30
        assert store.query("ab", vecs[0], k=3) == []


def test_a_collection_missing_on_the_server_keeps_the_corpus_for_a_reindex(
    chroma_server: str, tmp_path: Path
) -> None:
    """The server lost the collection (or the node was pointed at another server): the corpus
    and its document list stay in the ledger, queries say how to recover, a reindex rebuilds it."""
    rng = np.random.default_rng(11)
    vecs = rng.normal(size=(6, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    chunks = [
        Chunk(
            f"lost-{i}", f"lost chunk {i}", {"doc_cid": "lost", "page": 1, "chunk_index": i, "language": "en"}
        )
        for i in range(6)
    ]
    ledger = tmp_path / "ledger"
    with CorpusStore(ledger, server_url=chroma_server) as store:
        store.create_corpus("lost", embedding_model="m", dim=32)
        store.add_document("lost", chunks, vecs)
        store._client.delete_collection(collection_name("lost"))
    with CorpusStore(ledger, server_url=chroma_server) as store:  # opening must neither fail nor drop it
        assert store.corpora() == ["lost"]
        assert store.info("lost").docs == 1
        with pytest.raises(NotFound, match="rag reindex --corpus lost"):
            store.query("lost", vecs[0], k=3)
        assert [d["doc_cid"] for d in store.documents("lost")] == ["lost"]
        with pytest.raises(NotFound, match="rag reindex"):  # not "already ingested": it cannot be answered
            store.document("lost", "lost")
        info = store.replace_corpus("lost", embedding_model="m", dim=32, documents=[(chunks, vecs)])
        assert (info.docs, info.chunks) == (1, 6)
        assert store.query("lost", vecs[4], k=1)[0].chunk_id == "lost-4"


def _connections_to(port: int) -> int:
    """How many TCP sockets this process holds open to ``port`` (from ``/proc``)."""
    fds = Path("/proc/self/fd")
    inodes = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    held = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                held += 1
    return held


def test_closing_the_store_closes_its_connections_to_the_server(chroma_server: str, tmp_path: Path) -> None:
    """chromadb's own ``close`` leaves its HTTP session open: the store closes it, so no socket to
    the server waits for the garbage collector."""
    port = int(chroma_server.rsplit(":", 1)[1])
    vecs = np.eye(4, dtype=np.float32)
    chunks = [Chunk(f"c-{i}", f"chunk {i}", {"doc_cid": "c", "page": 1, "chunk_index": i}) for i in range(4)]
    store = CorpusStore(tmp_path / "ledger", server_url=chroma_server)
    try:
        store.create_corpus("closing", embedding_model="m", dim=4)
        store.add_document("closing", chunks, vecs)
        assert store.query("closing", vecs[1], k=1)[0].chunk_id == "c-1"
        assert _connections_to(port) >= 1  # kept alive for the next request
    finally:
        store.close()
    assert _connections_to(port) == 0
