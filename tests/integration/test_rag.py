"""The RAG service across real node processes, with the real model reached over the bus.

A: anchor, serves embed.text and rag.   B: trusted, serves rag, embeds through A.
C: plain member with neither service.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

ROOT = Path(__file__).resolve().parents[2]
SHARED_PDFS = PDF_DIR
DEMO = ROOT / "hearthnet" / "demo"

# Expected outcome of every shared PDF: "ok" or a fragment of its specific bad_request message.
EXPECTED = {
    "corrupt_header_only.pdf": "not a readable PDF",
    "malformed_broken_page_tree.pdf": "not a readable PDF",
    "empty_zero_bytes.pdf": "empty",
    "encrypted_password_openpassword.pdf": "password",
    "scanned_image_only_no_text.pdf": "run OCR first",
}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("rag"))
    m.env["HEARTHNET_OCR"] = "0"  # no OCR provider in the mesh: a scan is refused ("run OCR first")
    try:
        a = m.add("a")
        b = m.add("b", env={"HEARTHNET_EMBEDDING": "0"})
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=90)
        wait_for(
            lambda: any(x["capability"] == "embed.text@1.0" for x in b.status()["capabilities"]),
            timeout=60,
            what="B to see A's embedder",
        )
        yield m
    finally:
        m.close()


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]


def ingest(node: MeshNode, *paths: Path, corpus: str, on: str | None = None) -> tuple[int, dict[str, Any]]:
    args = ["ingest", *map(str, paths), "--corpus", corpus, "--json"]
    if on:
        args += ["--on", on]
    proc = node.cli(*args, check=False, timeout=900)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}


def corpus_info(node: MeshNode, name: str) -> dict[str, Any] | None:
    return next((c for c in node.cli_json("corpora")["corpora"] if c["name"] == name), None)


def test_demo_pdfs_ingested_on_b_from_a_answer_with_the_right_page(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    code, out = ingest(a, *sorted(DEMO.glob("*.pdf")), corpus="household", on=b.node_id)
    assert code == 0, out
    assert all(r["ok"] and r["node"] == b.node_id for r in out["results"])
    for asker in (a, c):  # neither holds the corpus: the bus routes to B
        result = asker.cli_json("query", "When is the boiler serviced?", "--corpus", "household")
        assert result["provider"] == b.node_id
        top = result["chunks"][0]
        assert top["metadata"]["doc_title"] == "Heating and Hot Water Handbook"
        assert top["metadata"]["page"] == 1
        assert "October" in top["text"]
        assert result["meta"]["embedding_model"] == "all-MiniLM-L6-v2"
        assert 0 < result["meta"]["embed_ms"] < result["meta"]["ms"]
    garden = c.cli_json("query", "when do potatoes go into the ground", "--corpus", "household", "-k", "1")
    assert garden["chunks"][0]["metadata"]["page"] == 2


def test_ingest_is_idempotent_on_doc_cid(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    pdf = DEMO / "solar_and_battery.pdf"
    before = corpus_info(a, "household")
    code, out = ingest(a, pdf, corpus="household", on=b.node_id)
    assert code == 0
    assert out["results"][0]["existing"] is True
    after = corpus_info(a, "household")
    assert before is not None and after is not None
    assert (after["docs"], after["chunks"]) == (before["docs"], before["chunks"])


def test_ingest_event_gossips_to_every_member(mesh: LocalMesh) -> None:
    def ingested(node: MeshNode) -> set[str]:
        return {
            e["data"]["doc_cid"]
            for e in node.cli_json("events")["events"]
            if e["event_type"] == "rag.document.ingested" and e["data"]["corpus"] == "household"
        }

    a, b, c = nodes(mesh)
    wait_for(
        lambda: len(ingested(a)) == len(ingested(b)) == len(ingested(c)) == 3,
        timeout=30,
        what="three ingest events on every node",
    )
    events = [e for e in c.cli_json("events")["events"] if e["event_type"] == "rag.document.ingested"]
    assert all(e["author"] == b.node_id for e in events)


def test_plain_member_gets_unauthorized_from_ingest(mesh: LocalMesh) -> None:
    _, b, c = nodes(mesh)
    code, out = ingest(c, DEMO / "garden_and_seeds.pdf", corpus="household", on=b.node_id)
    assert code != 0  # refused before any file is copied, in one line
    assert out["stderr"].startswith(
        "hearthnet: unauthorized: ingesting into corpus household needs a trusted"
    )


def test_query_errors_have_the_right_codes(mesh: LocalMesh) -> None:
    a, _, _ = nodes(mesh)
    proc = a.cli("query", "anything", "--corpus", "no-such-corpus", check=False)
    assert proc.returncode != 0 and proc.stderr.startswith("hearthnet: not_found:")
    proc = a.cli("query", "anything", "--corpus", "household", "-k", "21", check=False)
    assert proc.stderr.startswith("hearthnet: bad_request:") and "20" in proc.stderr
    proc = a.cli("query", "anything", "--corpus", "Bad_Name", check=False)
    assert proc.stderr.startswith("hearthnet: ")
    proc = a.cli("query", "boiler", "--corpus", "household", "--filter", '{"page": {"$gte": 2}}', "--json")
    pages = [ch["metadata"]["page"] for ch in json.loads(proc.stdout)["chunks"]]
    assert pages and all(p >= 2 for p in pages)


def test_personal_corpus_is_never_reachable_from_another_node(mesh: LocalMesh, tmp_path: Path) -> None:
    a, b, _ = nodes(mesh)
    # A document of its own: one already shared (the demo PDFs are in `household`) stays shared.
    diary = tmp_path / "diary.md"
    diary.write_text("# My seed diary\n\nThe bean seeds I saved this autumn sit in the blue tin.\n")
    code, out = ingest(b, diary, corpus="personal", on=b.node_id)
    assert code == 0, out
    assert b.cli_json("query", "seeds", "--corpus", "personal")["chunks"]
    caps = [c for c in a.status()["capabilities"] if c["capability"] == "rag.query@1.0"]
    assert all(c["params"]["corpus"] != "personal" for c in caps)
    proc = a.cli(
        "call",
        "rag.query",
        "--params",
        '{"corpus": "personal"}',
        "--input",
        '{"query": "seeds"}',
        "--provider",
        b.node_id,
        check=False,
    )
    assert proc.returncode != 0 and "not_found" in proc.stderr
    # no event announces a personal document
    assert not [e for e in a.cli_json("events")["events"] if e["data"].get("corpus") == "personal"]
    # and its blob is private: a peer is told B does not hold it, and never sees it listed
    cid = out["results"][0]["doc_cid"]
    proc = a.cli(
        "call", "file.read", "--input", json.dumps({"doc_cid": cid}), "--provider", b.node_id, check=False
    )
    assert proc.returncode != 0 and "not_found" in proc.stderr
    listed = a.cli_json("call", "file.list", "--provider", b.node_id)["output"]["blobs"]
    assert cid not in {blob["doc_cid"] for blob in listed}


def test_every_shared_pdf_ingests_or_gets_its_specific_bad_request(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    pdfs = sorted(SHARED_PDFS.glob("*.pdf"))
    code, out = ingest(a, *pdfs, corpus="shared", on=b.node_id)
    assert code != 0  # some files are meant to fail
    results = {Path(r["path"]).name: r for r in out["results"]}
    assert set(results) == {p.name for p in pdfs}
    for name, r in results.items():
        if name in EXPECTED:
            assert not r["ok"], name
            assert r["error"] == "bad_request", (name, r)
            assert EXPECTED[name].lower() in r["message"].lower(), (name, r["message"])
        else:
            assert r["ok"], (name, r)
            assert r["chunks_indexed"] > 0
    # The node stayed up and holds exactly the successful documents, nothing partial.
    info = corpus_info(a, "shared")
    assert info is not None
    ok = [r for r in results.values() if r["ok"]]
    assert info["docs"] == len(ok)
    assert info["chunks"] == sum(r["chunks_indexed"] for r in ok)
    # B keeps the source of each document it indexed (`rag reindex` needs it); A's copies were
    # only in transit, and nothing refused is held anywhere.
    on_a, on_b = pins(a), pins(b)
    for r in results.values():
        assert on_a[r["doc_cid"]] is False, r
        assert on_b.get(r["doc_cid"], False) is r["ok"], r
    hit = a.cli_json("query", "Who must file Form 1040-NR?", "--corpus", "shared", "-k", "3")
    titles = [ch["metadata"]["doc_title"] for ch in hit["chunks"]]
    assert any("1040" in t or "i1040nr" in t.lower() for t in titles), titles
    assert all(
        isinstance(ch["metadata"]["page"], int) and ch["metadata"]["page"] >= 1 for ch in hit["chunks"]
    )


def pins(node: MeshNode) -> dict[str, bool]:
    return {blob["doc_cid"]: blob["pinned"] for blob in node.cli_json("file", "ls")["blobs"]}


def test_ingest_on_a_node_that_offers_no_ingest_fails_before_copying_anything(mesh: LocalMesh) -> None:
    a, _, c = nodes(mesh)
    before = pins(a)
    proc = a.cli(
        "ingest", str(DEMO / "garden_and_seeds.pdf"), "--corpus", "household", "--on", c.node_id, check=False
    )
    assert proc.returncode == 1 and "does not offer rag.ingest" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert pins(a) == before


def test_no_document_text_or_vectors_in_any_log(mesh: LocalMesh) -> None:
    sentences = [
        "registered engineer",  # from the demo heating handbook
        "When is the boiler serviced",  # a query
        "airtight glass jars",
    ]
    for node in mesh.nodes.values():
        if node.log_path is None:
            continue
        text = node.log_path.read_text(errors="replace")
        for s in sentences:
            assert s not in text, f"{node.name}'s log contains document or query text: {s!r}"
        assert '"embeddings"' not in text


def test_query_with_the_embedder_gone_is_partition(mesh: LocalMesh) -> None:
    """Runs last: it stops A, the only embedder."""
    a, b, _ = nodes(mesh)
    a.stop()
    wait_for(lambda: a.node_id not in b.peer_ids(), timeout=20, what="B to notice A left")
    proc = b.cli("query", "boiler", "--corpus", "household", check=False)
    assert proc.returncode != 0
    assert proc.stderr.startswith("hearthnet: partition:"), proc.stderr
    assert b.cli_json("call", "node.ping")["output"]["pong"] is True
