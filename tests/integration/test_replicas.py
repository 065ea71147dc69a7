"""Corpus replicas over real node processes on 127.0.0.1 (issue 32, ``specs/replicas.md``).

A: anchor, hosts corpus ``family`` (shared PDFs) and embeds.  B: trusted, holds a replica (and embeds,
so it can answer queries with A gone).  C: plain member, asks (no embedder, no RAG store of its own
needed to ask).  D: trusted, no embedder: the replica a tampered copy is offered to.

The tests run in file order and share the mesh.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.blobs.cid import blob_cid
from hearthnet.services.rag.store.chroma import collection_name
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

CORPUS = "family"
FIRST = [
    PDF_DIR / "en_paper_creativity_in_ml.pdf",
    PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf",
    PDF_DIR / "multicolumn_2col_latex.pdf",
]
LATER = PDF_DIR / "en_geobase_nhn_data_model.pdf"
BIG = PDF_DIR / "de_geotopo_lecture_notes.pdf"
QUESTION = "how do machine learning systems show creativity"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("replicas"))
    m.env["RAG_EMBED_TIMEOUT_SECONDS"] = "300"  # eight engineers share two cores
    try:
        a = m.add("a")
        b = m.add("b")
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0"})
        d = m.add("d", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.invite(a, d, "trusted", start=False)
        m.wait_full_mesh([a, b, c], timeout=120)
        yield m
    finally:
        m.close()


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]


def ingest(node: MeshNode, *paths: Path) -> dict[str, Any]:
    proc = node.cli("ingest", *map(str, paths), "--corpus", CORPUS, "--json", check=False, timeout=900)
    out: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == 0 and all(r["ok"] for r in out["results"]), out
    return out


def cid_of(path: Path) -> str:
    return blob_cid(path.read_bytes())


def replicas(node: MeshNode) -> dict[str, dict[str, Any]]:
    out = node.cli_json("call", "rag.replicate", "--input", "{}", timeout=30)["output"]
    return {r["corpus"]: r for r in out["replicas"]}


def replica_current(node: MeshNode, docs: int) -> dict[str, Any] | None:
    r = replicas(node).get(CORPUS)
    if r is None or r["behind"] != 0 or r["docs"] != docs or r["error"]:
        return None
    return r


def query(node: MeshNode, *extra: str) -> dict[str, Any]:
    out: dict[str, Any] = node.cli_json(
        "query", QUESTION, "--corpus", CORPUS, "-k", "8", "--mode", "dense", *extra, timeout=60
    )
    return out


def chunk_ids(answer: dict[str, Any]) -> list[str]:
    return [c["metadata"]["chunk_id"] for c in answer["chunks"]]


def log_records(node: MeshNode, event: str) -> list[dict[str, Any]]:
    assert node.log_path is not None
    out = []
    for line in node.log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == event:
            out.append(rec)
    return out


def query_providers(node: MeshNode) -> dict[str, dict[str, Any]]:
    return {
        c["node"]: c["params"]
        for c in node.status()["capabilities"]
        if c["capability"] == "rag.query@1.0" and c["params"].get("corpus") == CORPUS
    }


def test_a_replica_copies_chunks_and_vectors_without_embedding(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    ingest(a, *FIRST)
    events = [e for e in a.cli_json("events")["events"] if e["event_type"] == "rag.document.ingested"]
    assert len(events) == 3 and all(e["data"]["digest"].startswith("blake3:") for e in events)
    assert {e["data"]["embedding_model"] for e in events} == {"all-MiniLM-L6-v2"}
    embeds_before = b.cli_json("call", "node.stats")["output"]["capabilities"].get("embed.text@1.0", {})

    out = b.cli_json("corpus", "replicate", CORPUS, timeout=600)
    assert out["replicating"] and out["host"] == a.node_id
    wait_for(lambda: replica_current(b, 3), timeout=300, what="B's replica to hold all 3 documents")
    copied = log_records(b, "replica_copied")
    assert len(copied) == 3 and not any(r["reembedded"] for r in copied)
    embeds_after = b.cli_json("call", "node.stats")["output"]["capabilities"].get("embed.text@1.0", {})
    assert embeds_after.get("calls", 0) == embeds_before.get("calls", 0), "the replica embedded something"
    # The source came too, so a citation opens the PDF on the replica.
    blobs = {x["doc_cid"] for x in b.cli_json("file", "ls")["blobs"]}
    assert {e["data"]["doc_cid"] for e in events} <= blobs

    # C sees B as an up-to-date replica of A's corpus, not a second host.
    wait_for(lambda: query_providers(c).get(b.node_id, {}).get("behind") == 0, timeout=60, what="B's lag 0")
    assert query_providers(c)[b.node_id]["replica_of"] == a.node_id
    known = c.cli_json("call", "rag.known_corpora", "--input", json.dumps({"corpus": CORPUS}))["output"]
    hosts = {h["node"]: h for h in known["corpora"][0]["hosts"]}
    assert hosts[a.node_id]["role"] == "host" and hosts[b.node_id]["role"] == "replica"
    assert not known["corpora"][0]["duplicate"]

    # Same question, same chunks in the same order, from the host and from the replica.
    from_a = query(a)  # each node serves itself first
    from_b = query(b)
    assert from_a["provider"] == a.node_id and from_b["provider"] == b.node_id
    assert from_b["meta"]["replica_of"] == a.node_id and from_b["meta"]["behind"] == 0
    assert chunk_ids(from_a) == chunk_ids(from_b) and len(chunk_ids(from_a)) == 8


def test_with_the_host_stopped_a_third_node_gets_the_same_sources_from_the_replica(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    before = query(c)
    assert before["provider"] in (a.node_id, b.node_id)
    a.stop()
    stopped = time.monotonic()
    after = wait_for(
        lambda: (q := query(c)) and q["provider"] == b.node_id and q,
        timeout=60,
        what="C's query to be answered by B",
    )
    failover = time.monotonic() - stopped
    assert chunk_ids(after) == chunk_ids(before)
    assert failover < 60
    ask = c.cli_json("ask", QUESTION, "--corpus", CORPUS, timeout=120)
    sources = ask["sources"]
    assert sources and {s["node"] for s in sources} == {b.node_id}
    assert {s["chunk_id"] for s in sources} & set(chunk_ids(before))
    # The replica takes no writes: it names the host.
    proc = b.cli("ingest", str(LATER), "--corpus", CORPUS, "--on", b.node_id, "--json", check=False)
    assert proc.returncode != 0
    assert a.node_id in proc.stdout + proc.stderr


def test_a_delete_and_an_ingest_made_while_the_replica_was_off_apply_on_its_return(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    a.start()
    a.wait_ready(timeout=120)
    mesh.wait_full_mesh([a, b, c], timeout=120)
    b.stop()
    gone = cid_of(FIRST[2])
    a.cli_json("delete", gone, "--corpus", CORPUS)
    ingest(a, LATER)
    later = cid_of(LATER)
    b.start()
    b.wait_ready(timeout=120)
    state = wait_for(lambda: replica_current(b, 3), timeout=300, what="B to catch up on its return")
    assert state["host"] == a.node_id
    docs = {d["doc_cid"] for d in b.cli_json("docs", "--corpus", CORPUS, "--on", b.node_id)["documents"]}
    assert gone not in docs and later in docs


def _pending_rows(node: MeshNode) -> int:
    path = node.home / "rag" / "ledger.sqlite3"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.2)
    try:
        return int(db.execute("SELECT COUNT(*) FROM documents WHERE status != 'complete'").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


def test_kill_9_of_the_replica_mid_copy_leaves_no_partial_document_and_the_next_start_completes_it(
    mesh: LocalMesh,
) -> None:
    a, b, _ = nodes(mesh)
    b.stop()
    ingest(a, BIG)
    big = cid_of(BIG)
    b.start()
    assert b.process is not None
    wait_for(
        lambda: _pending_rows(b) > 0, timeout=300, what="B to start writing the big document", interval=0.005
    )
    os.kill(b.process.pid, signal.SIGSTOP)  # frozen mid-write, then killed: no clean-up of any kind
    b.kill()
    assert _pending_rows(b) > 0  # the kill left a document half-written on disk...
    b.start()
    b.wait_ready(timeout=120)
    state = wait_for(lambda: replica_current(b, 4), timeout=300, what="B to complete the copy")
    assert state["behind"] == 0
    docs = {d["doc_cid"]: d for d in b.cli_json("docs", "--corpus", CORPUS, "--on", b.node_id)["documents"]}
    on_a = {d["doc_cid"]: d for d in a.cli_json("docs", "--corpus", CORPUS, "--on", a.node_id)["documents"]}
    assert docs[big]["chunks"] == on_a[big]["chunks"]
    # Nothing of the killed write is left beside the complete copy: ChromaDB holds exactly the
    # ledger's chunks.
    b.stop()
    assert _chroma_count(b.home / "rag") == sum(d["chunks"] for d in docs.values())
    b.start()
    b.wait_ready(timeout=120)


def _chroma_count(rag_dir: Path) -> int:
    import chromadb

    client = chromadb.PersistentClient(path=str(rag_dir / "chroma"))
    col = client.get_collection(collection_name(CORPUS), embedding_function=None)
    return int(col.count())


def test_a_tampered_copy_is_refused_and_nothing_is_written(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    d = mesh.nodes["d"]
    b.stop()
    _tamper_one_vector(b.home / "rag")
    b.start()
    b.wait_ready(timeout=120)
    d.start()
    d.wait_ready(timeout=120)
    mesh.wait_full_mesh([a, b, d], timeout=120)
    a.stop()  # only B (tampered) can serve the copy
    wait_for(
        lambda: any(e["event_type"] == "rag.document.ingested" for e in d.cli_json("events")["events"]),
        timeout=60,
        what="D to have the ingest events",
    )
    out = d.cli_json("corpus", "replicate", CORPUS, timeout=600)
    assert out["replicating"]
    wait_for(
        lambda: log_records(d, "replica_copy_refused"), timeout=120, what="D to refuse B's tampered copy"
    )
    state = replicas(d)[CORPUS]
    assert state["behind"] > 0 and "digest" in (state["error"] or "")
    # The refused document is not in D's corpus (the untampered ones may be).
    refused = {r["doc_cid"] for r in log_records(d, "replica_copy_refused")}
    assert _complete_docs(d) & refused == set()
    a.start()
    a.wait_ready(timeout=120)


def _complete_docs(node: MeshNode) -> set[str]:
    path = node.home / "rag" / "ledger.sqlite3"
    if not path.exists():
        return set()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {str(r[0]) for r in db.execute("SELECT doc_cid FROM documents WHERE status = 'complete'")}
    except sqlite3.Error:
        return set()
    finally:
        db.close()


def _tamper_one_vector(rag_dir: Path) -> None:
    """Change one vector of one chunk in a stopped node's ChromaDB (as a faulty disk or node would)."""
    import chromadb
    import numpy as np

    client = chromadb.PersistentClient(path=str(rag_dir / "chroma"))
    col = client.get_collection(collection_name(CORPUS), embedding_function=None)
    got = col.get(limit=1, include=["embeddings", "metadatas", "documents"])
    vector = np.asarray(got["embeddings"][0], dtype=np.float32)
    vector[0] += 0.25
    col.update(ids=[got["ids"][0]], embeddings=[vector.tolist()])


def test_a_member_cannot_hold_a_replica_and_personal_never_replicates(mesh: LocalMesh) -> None:
    _, _, c = nodes(mesh)
    proc = c.cli("corpus", "replicate", CORPUS, check=False)
    assert proc.returncode != 0 and "unauthorized" in proc.stderr and "member" in proc.stderr
    proc = c.cli("corpus", "replicate", "personal", check=False)
    assert proc.returncode != 0 and "bad_request" in proc.stderr and "never replicates" in proc.stderr


MOVED_IN = PDF_DIR / "scanned_with_ocr_text_layer.pdf"


def test_corpus_move_to_the_replica_and_the_old_host_returning_does_not_fork(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    wait_for(lambda: replica_current(b, 4), timeout=300, what="B up to date before the move")
    # The status and the corpus list show the replica and its lag.
    status = b.cli_json("status")
    assert [r["corpus"] for r in status["replicas"]] == [CORPUS]
    assert "REPLICA of" in c.cli("corpora").stdout
    a.cli_json("member", "promote", b.node_id, "--level", "anchor")
    wait_for(lambda: b.status()["level"] == "anchor", timeout=60, what="B to hear of its promotion")
    a.stop()  # the host is gone (for all B knows, for good)
    out = wait_for(
        lambda: (
            (p := b.cli("corpus", "move", CORPUS, "--to", b.node_id, "--json", check=False)).returncode == 0
            and p
        ),
        timeout=60,
        what="the move",
    )
    assert json.loads(out.stdout)["from"] == a.node_id
    wait_for(lambda: CORPUS not in replicas(b), timeout=60, what="B to become the host")
    ingest(b, MOVED_IN)  # the new host takes writes
    a.start()
    a.wait_ready(timeout=120)
    # A learns of the move, becomes a replica of B and copies what B ingested meanwhile.
    state = wait_for(lambda: replica_current(a, 5), timeout=300, what="A to follow B")
    assert state["host"] == b.node_id
    proc = a.cli("ingest", str(LATER), "--corpus", CORPUS, "--on", a.node_id, "--json", check=False)
    assert proc.returncode != 0 and b.node_id in proc.stdout + proc.stderr
    known = c.cli_json("call", "rag.known_corpora", "--input", json.dumps({"corpus": CORPUS}))["output"]
    entry = known["corpora"][0]
    hosting = [h["node"] for h in entry["hosts"] if h["hosting"]]
    assert hosting == [b.node_id] and not entry["duplicate"]
    roles = {h["node"]: h["role"] for h in entry["hosts"] if h["serving"]}
    assert roles.get(a.node_id) == "replica" and roles.get(b.node_id) == "host"


LAGGED = PDF_DIR / "zh_quarterly_report.pdf"


def test_a_lagging_replica_answers_only_when_nothing_fresher_is_online_and_says_so(mesh: LocalMesh) -> None:
    """Runs after the move: B hosts, A replicates B.  A is off while B ingests; then B goes away and
    A hears of the ingest from C (the log travels by gossip), but nobody can serve the copy."""
    a, b, c = nodes(mesh)
    mesh.nodes["d"].stop()  # another copy would be fresher than A's
    wait_for(lambda: replica_current(a, 5), timeout=300, what="A up to date")
    a.stop()
    ingest(b, LAGGED)
    wait_for(
        lambda: sum(e["event_type"] == "rag.document.ingested" for e in c.cli_json("events")["events"]) >= 7,
        timeout=60,
        what="C to hold B's new ingest event",
    )
    b.stop()
    a.start()
    a.wait_ready(timeout=120)
    state = wait_for(
        lambda: (r := replicas(a).get(CORPUS)) and r["behind"] == 1 and r,
        timeout=120,
        what="A to know it is one document behind",
    )
    assert state["host"] == b.node_id
    answer = wait_for(
        lambda: (q := query(c)) and q["provider"] == a.node_id and q,
        timeout=120,
        what="C's query to be answered by A",
    )
    assert answer["meta"]["behind"] == 1
    assert any("from a copy 1 document behind" in w for w in answer["meta"]["warnings"])
    assert "1 document behind" in c.cli("corpora").stdout
    ask = c.cli("ask", QUESTION, "--corpus", CORPUS, timeout=120)
    assert "from a copy 1 document behind" in ask.stdout, ask.stdout
