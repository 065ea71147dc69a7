"""``hearthnet docs set`` / ``rag.update`` over real node processes on 127.0.0.1 (issue 34 item 5).

A: anchor, hosts corpus ``papers`` and embeds.  B: trusted, holds a replica, no embedder.  C: plain
member, no embedder.  D: trusted, no embedder, joins later and copies a document already updated.

The tests run in file order and share the mesh.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pypdf import PdfReader, PdfWriter

from hearthnet.blobs.cid import blob_cid
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

CORPUS = "papers"
LATEX = PDF_DIR / "multicolumn_2col_latex.pdf"
NAACL = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
QUESTION = "paraphrase acquisition from news articles"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("docs-set"))
    m.env["RAG_EMBED_TIMEOUT_SECONDS"] = "300"  # engineers share two cores
    try:
        a = m.add("a")
        b = m.add("b", env={"HEARTHNET_EMBEDDING": "0"})
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


def replica_current(node: MeshNode, docs: int) -> dict[str, Any] | None:
    out = node.cli_json("call", "rag.replicate", "--input", "{}", timeout=30)["output"]
    r = {x["corpus"]: x for x in out["replicas"]}.get(CORPUS)
    if r is None or r["behind"] != 0 or r["docs"] != docs or r["error"]:
        return None
    return dict(r)


def listed_on(node: MeshNode, provider: MeshNode) -> dict[str, dict[str, Any]]:
    """The documents ``provider``'s copy lists (asked from ``node``), by id."""
    out = node.cli_json(
        "call",
        "rag.list_documents",
        "--params",
        json.dumps({"corpus": CORPUS}),
        "--provider",
        provider.node_id,
        timeout=30,
    )["output"]
    return {d["doc_cid"]: d for d in out["documents"]}


def hits_on(node: MeshNode, provider: MeshNode, filter: dict[str, Any]) -> list[dict[str, Any]]:
    inp = {"query": QUESTION, "k": 20, "filter": filter, "mode": "dense", "include_text": False}
    out = node.cli_json(
        "call",
        "rag.query",
        "--params",
        json.dumps({"corpus": CORPUS}),
        "--input",
        json.dumps(inp),
        "--provider",
        provider.node_id,
        timeout=120,
    )["output"]
    return list(out["chunks"])


def log_events(node: MeshNode, event: str) -> list[dict[str, Any]]:
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


def test_setup_a_hosts_two_documents_and_b_replicates_them(mesh: LocalMesh) -> None:
    a, b, _ = nodes(mesh)
    for path, day in ((LATEX, "2020-05-01"), (NAACL, "2006-06-04")):
        a.cli(
            "ingest", str(path), "--corpus", CORPUS, "--meta", f"year={day[:4]}", "--meta", "kind=paper",
            "--meta", f"timestamp:date={day}", timeout=900,
        )  # fmt: skip
    out = b.cli_json("corpus", "replicate", CORPUS, timeout=600)
    assert out["replicating"]
    wait_for(lambda: replica_current(b, 2), timeout=300, what="B's replica to hold both documents")


def test_a_member_may_not_change_a_document(mesh: LocalMesh) -> None:
    _, _, c = nodes(mesh)
    proc = c.cli("docs", "set", LATEX.name, "--corpus", CORPUS, "--title", "nope", check=False, timeout=120)
    assert proc.returncode != 0
    assert "unauthorized" in proc.stderr and "trusted" in proc.stderr, proc.stderr


def test_docs_set_from_another_node_changes_title_and_metadata_on_the_host(mesh: LocalMesh) -> None:
    a, b, c = nodes(mesh)
    cid = blob_cid(LATEX.read_bytes())
    before = hits_on(c, a, {"doc_cid": cid})
    out = b.cli_json(
        "docs", "set", LATEX.name, "--corpus", CORPUS,
        "--meta", "year=2024", "--meta", "topic=layout", "--unset", "kind", "--title", "Two columns",
        timeout=300,
    )  # fmt: skip
    assert out["changed"] and out["node"] == a.node_id and out["doc_cid"] == cid
    assert out["title"] == "Two columns"
    assert out["metadata"] == {"year": 2024, "topic": "layout", "timestamp": "2020-05-01"}
    assert out["update_event_id"]

    # another node sees it at once: the listing, the chunks, a filter on the new values
    assert listed_on(c, a)[cid]["title"] == "Two columns"
    assert listed_on(c, a)[cid]["metadata"] == out["metadata"]  # what was set can be read back
    human = c.cli("docs", "--corpus", CORPUS).stdout
    assert "    timestamp='2020-05-01', topic='layout', year=2024" in human.splitlines(), human
    hits = hits_on(c, a, {"year": 2024})
    assert hits and {h["metadata"]["doc_cid"] for h in hits} == {cid}
    assert all(h["metadata"]["doc_title"] == "Two columns" and "kind" not in h["metadata"] for h in hits)
    assert hits_on(c, a, {"$and": [{"doc_cid": cid}, {"kind": "paper"}]}) == []
    # not re-embedded: the same chunks with the same similarity to the question
    after = hits_on(c, a, {"doc_cid": cid})
    assert [(h["metadata"]["chunk_id"], h["similarity"]) for h in after] == [
        (h["metadata"]["chunk_id"], h["similarity"]) for h in before
    ]
    events = [e for e in a.cli_json("events")["events"] if e["event_type"] == "rag.document.updated"]
    assert len(events) == 1 and events[0]["author"] == a.node_id
    assert events[0]["data"]["metadata"] == out["metadata"]
    assert events[0]["data"]["digest"].startswith("blake3:")


def test_the_replica_follows_the_update_in_place(mesh: LocalMesh) -> None:
    _, b, c = nodes(mesh)
    cid = blob_cid(LATEX.read_bytes())
    wait_for(
        lambda: listed_on(c, b).get(cid, {}).get("title") == "Two columns",
        timeout=300,
        what="B's replica to take the new title",
    )
    hits = hits_on(c, b, {"topic": "layout"})
    assert hits and {h["metadata"]["doc_cid"] for h in hits} == {cid}
    assert all(h["metadata"]["year"] == 2024 and "kind" not in h["metadata"] for h in hits)
    assert len(log_events(b, "replica_copied")) == 2, "the replica copied the document again"
    assert log_events(b, "replica_updated")
    assert replica_current(b, 2) is not None


def test_setting_the_same_values_again_changes_nothing_and_an_unknown_document_is_not_found(
    mesh: LocalMesh,
) -> None:
    a, _, _ = nodes(mesh)
    proc = a.cli("docs", "set", LATEX.name, "--corpus", CORPUS, "--meta", "year=2024", timeout=300)
    assert "nothing changed" in proc.stdout
    missing = a.cli("docs", "set", "nope.pdf", "--corpus", CORPUS, "--title", "x", check=False, timeout=120)
    assert missing.returncode != 0 and "not_found" in missing.stderr and "nope.pdf" in missing.stderr
    bad = a.cli("docs", "set", LATEX.name, "--corpus", CORPUS, "--meta", "page=3", check=False, timeout=120)
    assert bad.returncode != 0 and "reserved" in bad.stderr
    events = [e for e in a.cli_json("events")["events"] if e["event_type"] == "rag.document.updated"]
    assert len(events) == 1


def stdin_ingest(node: MeshNode, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        node.command("ingest", "-", "--corpus", CORPUS, *args),
        input=text,
        capture_output=True,
        text=True,
        env={**node.env, **node.extra_env},
        timeout=900,
        check=True,
    )


def test_a_text_from_stdin_takes_its_title_and_a_date_range_finds_exactly_the_documents_in_it(
    mesh: LocalMesh,
) -> None:
    a, _, c = nodes(mesh)
    notes = "The kitchen boiler was serviced in March; the filter needs changing every spring."
    stdin_ingest(a, notes, "--title", "Kitchen notes", "--meta", "timestamp:date=2024-03-12")
    titles = {d["title"] for d in listed_on(c, a).values()}
    assert "Kitchen notes" in titles and "stdin" not in titles
    in_range = {"$and": [{"timestamp": {"$gte": "2020-01-01"}}, {"timestamp": {"$lte": "2024-03-12"}}]}
    found = c.cli_json(
        "query", "boiler", "--corpus", CORPUS, "-k", "20", "--filter", json.dumps(in_range), timeout=120
    )
    got = {ch["metadata"]["doc_cid"] for ch in found["chunks"]}
    assert got == {blob_cid(LATEX.read_bytes()), blob_cid(notes.encode())}
    later = {"timestamp": {"$gt": "2024-03-12"}}
    none = c.cli_json("query", "boiler", "--corpus", CORPUS, "--filter", json.dumps(later), timeout=120)
    assert none["chunks"] == []


def test_ingesting_a_document_again_with_other_values_says_how_to_change_them(mesh: LocalMesh) -> None:
    a, _, c = nodes(mesh)
    cid = blob_cid(LATEX.read_bytes())
    proc = a.cli(
        "ingest", str(LATEX), "--corpus", CORPUS, "--meta", "year=2031", "--title", "Newer", timeout=300
    )
    assert "already indexed" in proc.stdout and "kept" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if "hearthnet docs set" in x)
    assert "year=2024" in line  # what it kept
    assert hits_on(c, a, {"year": 2031}) == []  # kept, not changed
    command = shlex.split(line.split("run: ", 1)[1])
    assert command[:4] == ["hearthnet", "docs", "set", cid]
    a.cli(*command[1:], timeout=300)  # the command it names does it
    assert listed_on(c, a)[cid]["title"] == "Newer"
    assert {h["metadata"]["year"] for h in hits_on(c, a, {"doc_cid": cid})} == {2031}
    as_json = a.cli_json("ingest", str(LATEX), "--corpus", CORPUS, "--meta", "year=2032", timeout=300)
    assert as_json["results"][0]["kept"] == {"metadata": {"year": 2031}}


def test_the_page_that_answers_is_quoted_not_the_title_page(mesh: LocalMesh, tmp_path: Path) -> None:
    """Walden's title, notice and contents pages (marked low_text at ingest) no longer come first
    for a question whose words they share, and the answer quotes the page that answers (p. 65 of
    the book), not the title page."""
    a, _, c = nodes(mesh)
    excerpt = tmp_path / "walden-excerpt.pdf"
    book, wanted = [2, 3, 4, 5, 64, 65, 66], 65
    reader, writer = PdfReader(str(PDF_DIR / "en_walden_thoreau_249p.pdf")), PdfWriter()
    for n in book:
        writer.add_page(reader.pages[n - 1])
    with excerpt.open("wb") as fh:
        writer.write(fh)
    a.cli("ingest", str(excerpt), "--corpus", "walden", timeout=900)
    question = "When did Thoreau go to live in the woods?"
    for mode in ("hybrid", "dense"):
        out = c.cli_json("query", question, "--corpus", "walden", "--mode", mode, timeout=120)
        pages = [book[ch["metadata"]["page"] - 1] for ch in out["chunks"]]
        assert pages[0] not in (2, 3, 4) and wanted in pages, (mode, pages)  # before: 2 (the title)
        for ch in out["chunks"]:  # a title page may follow: its score halved, its cosine kept
            if ch["metadata"].get("low_text") and mode == "dense":
                assert ch["score"] < ch["similarity"]
    answer = c.cli_json("ask", question, "--corpus", "walden", timeout=300)
    cited = [s for s in answer["sources"] if s["cited"]]
    assert cited and book[cited[0]["page"] - 1] == wanted, answer["sources"][:3]
    assert "Independence Day" in " ".join(cited[0]["text"].split())


def test_a_new_replica_copies_the_updated_document(mesh: LocalMesh) -> None:
    """Its copy matches the update's digest, not the ingest's: accepted, and nothing left to apply."""
    a, _, c = nodes(mesh)
    d = mesh.nodes["d"]
    d.start()
    d.wait_ready()
    mesh.wait_full_mesh([a, d], timeout=120)
    d.cli_json("corpus", "replicate", CORPUS, timeout=600)
    wait_for(lambda: replica_current(d, 3), timeout=300, what="D's replica to hold the 3 documents")
    cid = blob_cid(LATEX.read_bytes())
    assert listed_on(c, d)[cid]["title"] == listed_on(c, a)[cid]["title"] == "Newer"  # updated twice
    assert not log_events(d, "replica_copy_refused")
    assert {h["metadata"]["year"] for h in hits_on(c, d, {"doc_cid": cid})} == {2031}


def test_a_new_file_name_is_what_the_host_and_both_replicas_cite(mesh: LocalMesh) -> None:
    """``docs set --filename`` (what a watched folder does when a file is renamed): every chunk's
    ``doc_filename`` on the host, and on each replica once it has followed the signed update."""
    a, b, c = nodes(mesh)
    d = mesh.nodes["d"]
    cid = blob_cid(LATEX.read_bytes())
    out = b.cli_json("docs", "set", cid, "--corpus", CORPUS, "--filename", "two-columns.pdf", timeout=300)
    assert out["changed"] and out["filename"] == "two-columns.pdf" and out["node"] == a.node_id
    for node in (a, b, d):  # the host at once; each replica when it has applied the update
        wait_for(
            lambda n=node: listed_on(c, n).get(cid, {}).get("filename") == "two-columns.pdf",
            timeout=300,
            what=f"{node.name} to list the new file name",
        )
        hits = hits_on(c, node, {"doc_cid": cid})
        assert hits and {h["metadata"]["doc_filename"] for h in hits} == {"two-columns.pdf"}
        assert {h["metadata"]["year"] for h in hits} == {2031}  # the rest is kept
    assert not log_events(d, "replica_copy_refused") and not log_events(b, "replica_copy_refused")
