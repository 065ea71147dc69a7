"""What a new user broke with corpora across real node processes (the "Hardening" issue, rows 3, 10,
15-18, 20), and the document commands that were missing: ``docs``, ``delete``, ``query -``.

A: anchor, serves embed.text and rag.   B: trusted, serves rag (embeds through A).
C: plain member that runs rag too (so ``--on C`` reaches a node that is not trusted).

The tests run in file order and share the mesh; the last one stops B for good.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "hearthnet" / "demo"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("catalog"))
    try:
        a = m.add("a")
        b = m.add("b", env={"HEARTHNET_EMBEDDING": "0"})
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=90)
        for node in (b, c):
            wait_for(
                lambda node=node: any(
                    x["capability"] == "embed.text@1.0" for x in node.status()["capabilities"]
                ),
                timeout=60,
                what=f"{node.name} to see A's embedder",
            )
        yield m
    finally:
        m.close()


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A family folder as people have them: documents, a README about the folder, a manifest, junk."""
    docs = tmp_path_factory.mktemp("family-docs")
    shutil.copy(DEMO / "heating_handbook.pdf", docs / "heating_handbook.pdf")
    shutil.copy(DEMO / "garden_and_seeds.pdf", docs / "garden_and_seeds.pdf")
    (docs / "README.md").write_text("# Family papers\n\nScans and notes of the household, sorted by room.\n")
    (docs / "MANIFEST.rtf").write_text("{\\rtf1 heating_handbook.pdf: cellar}")
    (docs / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    return docs


def cli(node: MeshNode, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(node.home), *args]
    return subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, env={**node.env, **node.extra_env}, timeout=600
    )


def events(node: MeshNode, kind: str) -> list[dict[str, Any]]:
    return [e for e in node.cli_json("events")["events"] if e["event_type"] == kind]


def pinned(node: MeshNode, cid: str) -> bool:
    return any(b["doc_cid"] == cid and b["pinned"] for b in node.cli_json("file", "ls")["blobs"])


def test_ingesting_a_folder_says_what_went_in_and_what_was_skipped_and_why(
    mesh: LocalMesh, folder: Path
) -> None:
    a, b, _ = nodes(mesh)
    out = a.cli_json("ingest", str(folder), "--corpus", "family", "--on", b.node_id, timeout=600)
    assert [Path(r["path"]).name for r in out["results"]] == [
        "README.md",
        "garden_and_seeds.pdf",
        "heating_handbook.pdf",
    ]
    assert all(r["ok"] for r in out["results"])
    skipped = {Path(s["path"]).name: s["reason"] for s in out["skipped"]}
    assert set(skipped) == {"MANIFEST.rtf", ".DS_Store"} and ".rtf" in skipped["MANIFEST.rtf"]
    assert out["summary"].startswith("ingested 3 of 5 files into family on ")
    assert out["new_corpus"] is True  # nobody held family before
    again = a.cli("ingest", str(folder), "--corpus", "family")  # the host is found: B
    assert "is new" not in again.stderr
    lines = again.stdout.splitlines()
    assert "ok    README.md: 1 chunk (already indexed)" in lines
    assert any(
        line.startswith("note  ") and "README.md" in line and "hearthnet delete" in line for line in lines
    )
    assert lines[-1].startswith("ingested 3 of 5 files into family on " + b.node_id)
    assert "3 already indexed" in lines[-1] and "2 skipped: .DS_Store (hidden" in lines[-1]


def test_query_shows_file_and_page_and_reads_the_question_from_stdin(mesh: LocalMesh) -> None:
    _, _, c = nodes(mesh)
    proc = cli(c, "query", "-", "--corpus", "family", "-k", "1", stdin="When is the boiler serviced?\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("heating_handbook.pdf p.1  (Heating and Hot Water Handbook)")
    hit = json.loads(cli(c, "query", "-", "--corpus", "family", "--json", stdin="boiler").stdout)
    assert hit["chunks"][0]["metadata"]["doc_filename"] == "heating_handbook.pdf"


def test_a_corpus_name_hosted_on_another_node_is_refused_by_the_cli_and_by_the_node(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    """Row 3: ``ingest x --corpus family --on A`` while B hosts family made a second, 1-document
    family that took every query.  Now the CLI refuses before copying anything, and A's rag.ingest
    refuses a caller that skips the CLI (a second client), both naming B."""
    a, b, _ = nodes(mesh)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe spare key is under the blue pot.\n")
    proc = a.cli("ingest", str(note), "--corpus", "family", "--on", a.node_id, check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("hearthnet: bad_request: corpus family already exists on node b (")
    assert b.node_id in proc.stderr
    cid = a.cli_json("file", "put", str(note))["doc_cid"]
    proc = a.cli(
        "call", "rag.ingest", "--params", '{"corpus": "family"}', "--input", json.dumps({"doc_cid": cid}),
        "--provider", a.node_id, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "bad_request" in proc.stderr and b.node_id in proc.stderr
    assert {c["node"] for c in a.cli_json("corpora")["corpora"] if c["name"] == "family"} == {b.node_id}


def test_an_ingest_on_a_member_that_is_not_trusted_names_that_node(mesh: LocalMesh) -> None:
    """Row 10: "this node is not trusted" read as the local node."""
    a, _, c = nodes(mesh)
    proc = a.cli(
        "ingest",
        str(DEMO / "solar_and_battery.pdf"),
        "--corpus",
        "solar",
        "--on",
        c.node_id,
        "--json",
        check=False,
    )
    assert proc.returncode == 1
    (result,) = json.loads(proc.stdout)["results"]
    assert result["error"] == "unauthorized" and f"node {c.node_id} is only a member" in result["message"]


def test_filters_say_how_to_combine_conditions_and_warn_of_a_field_no_chunk_has(mesh: LocalMesh) -> None:
    a, _, _ = nodes(mesh)
    proc = a.cli(
        "query", "boiler", "--corpus", "family", "--filter", '{"page": {"$gte": 1, "$lte": 2}}', check=False
    )
    assert proc.returncode == 1 and '{"$and": [{"page": {"$gte": 1}}, {"page": {"$lte": 2}}]}' in proc.stderr
    proc = a.cli("query", "boiler", "--corpus", "family", "--filter", '{"pgae": 1}')
    assert proc.stdout.strip() == "(no matches)"
    assert proc.stderr.startswith("hearthnet: warning: ") and "'pgae'" in proc.stderr
    hit = a.cli_json("query", "boiler", "--corpus", "family", "--filter", '{"pgae": 1}')
    assert any("'pgae'" in w for w in hit["meta"]["warnings"])


def test_docs_lists_a_corpus_and_delete_takes_a_document_out_everywhere(
    mesh: LocalMesh, folder: Path
) -> None:
    a, b, c = nodes(mesh)
    listed = c.cli_json("docs", "--corpus", "family")
    assert listed["node"] == b.node_id and listed["total"] == 3
    docs = {d["filename"]: d for d in listed["documents"]}
    assert set(docs) == {"README.md", "garden_and_seeds.pdf", "heating_handbook.pdf"}
    heating = docs["heating_handbook.pdf"]
    assert heating["title"] == "Heating and Hot Water Handbook" and heating["pages"] >= 1
    assert heating["chunks"] > 0 and heating["language"] == "en" and heating["ingested_by"] == a.node_id
    human = c.cli("docs", "--corpus", "family").stdout
    assert "heating_handbook.pdf" in human and f"by a ({a.node_id})" in human and heating["doc_cid"] in human

    readme = docs["README.md"]["doc_cid"]
    proc = c.cli("delete", readme, "--corpus", "family", check=False)  # a member may not
    assert proc.returncode == 1 and proc.stderr.startswith("hearthnet: unauthorized:")
    out = a.cli_json("delete", "README.md", "--corpus", "family")  # by its file name, as docs set
    assert out["doc_cid"] == readme
    assert out["node"] == b.node_id and out["chunks_removed"] == 1 and not pinned(b, readme)
    for node in (a, b, c):  # announced, signed by the host, gossiped like the ingest event
        wait_for(
            lambda node=node: (
                [e["data"] for e in events(node, "rag.document.deleted")]
                == [{"corpus": "family", "doc_cid": readme}]
            ),
            timeout=30,
            what=f"{node.name} to hear of the deletion",
        )
    assert events(c, "rag.document.deleted")[0]["author"] == b.node_id
    # deleted means no longer announced: the old ingest event no longer counts as in effect
    proc = a.cli("delete", readme, "--corpus", "family", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("hearthnet: not_found: document ")
    proc = a.cli("delete", "README.md", "--corpus", "family", check=False)
    assert proc.returncode == 1 and "has the file name or title 'README.md'" in proc.stderr
    assert c.cli_json("docs", "--corpus", "family")["total"] == 2
    hits = c.cli_json("query", "family papers sorted by room", "--corpus", "family", "-k", "20")["chunks"]
    assert readme not in {h["metadata"]["doc_cid"] for h in hits}
    # ingested again after the delete: a new ingest, announced again, its source pinned again
    again = a.cli_json("ingest", str(folder / "README.md"), "--corpus", "family")["results"][0]
    assert again["ok"] and not again["existing"] and pinned(b, readme)
    wait_for(
        lambda: sum(e["data"]["doc_cid"] == readme for e in events(c, "rag.document.ingested")) == 2,
        timeout=30,
        what="the second ingest event to reach C",
    )
    assert c.cli_json("docs", "--corpus", "family")["total"] == 3


def test_asking_a_node_that_does_not_hold_the_corpus_names_its_host(mesh: LocalMesh) -> None:
    """QA O: ``docs --corpus family --on A`` (B hosts it) said "not_found: ed25519:… offers no
    rag.list_documents@1.0 for these params"."""
    a, b, c = nodes(mesh)
    expected = (
        f"hearthnet: not_found: node a ({a.node_id}) does not hold corpus family: "
        f"it is hosted on b ({b.node_id})"
    )
    proc = c.cli("docs", "--corpus", "family", "--on", a.node_id, check=False)
    assert proc.returncode == 1 and proc.stderr == expected + "\n", proc.stderr
    proc = a.cli("delete", "blake3:" + "0" * 64, "--corpus", "family", "--on", a.node_id, check=False)
    assert proc.returncode == 1 and proc.stderr == expected + "\n", proc.stderr


def test_the_failure_line_counts_the_files_as_the_summary_does(mesh: LocalMesh, tmp_path: Path) -> None:
    """QA row 20: stderr said "4 of 10 files failed" while the summary said "ingested 6 of 13
    files … 4 failed, 3 skipped"; one file said "1 of 1 files"; skip reasons nested parentheses."""
    a, _, _ = nodes(mesh)
    docs = tmp_path / "mixed"
    docs.mkdir()
    (docs / "empty.md").write_text("")
    (docs / "notes.rtf").write_text("a\tb\n")
    (docs / ".hidden.txt").write_text("secret")
    proc = a.cli("ingest", str(docs), "--corpus", "family", check=False)
    assert proc.returncode == 1
    summary = proc.stdout.splitlines()[-1]
    assert summary.startswith("ingested 0 of 3 files into family on "), summary
    assert ", 1 failed, 2 skipped: .hidden.txt (hidden: its name starts with '.'); notes.rtf (" in summary
    assert "((" not in summary and "))" not in summary
    assert proc.stderr == "hearthnet: 1 of 3 files failed to ingest\n"
    proc = a.cli("ingest", str(docs / "empty.md"), "--corpus", "family", check=False)
    assert proc.returncode == 1 and proc.stderr == "hearthnet: 1 file failed to ingest\n"


def test_bad_unknown_and_offline_corpora_are_told_apart(mesh: LocalMesh, tmp_path: Path) -> None:
    """Rows 15-17.  Runs last but one: it stops B, the host of family, for good."""
    a, b, c = nodes(mesh)
    for name, fragment in [
        ("Family", "did you mean 'family'?"),
        ("fam/ily", "invalid"),
        ("f" * 65, "at most 64"),
        ("system", "corpus system is the reserved, read-only system corpus: no node of this mesh holds"),
        ("no-such", "no corpus 'no-such'; `hearthnet corpora` lists them"),
    ]:
        proc = c.cli("query", "boiler", "--corpus", name, check=False)
        assert proc.returncode == 1 and fragment in proc.stderr and "no provider" not in proc.stderr, (
            proc.stderr
        )
    proc = c.cli("docs", "--corpus", "system", check=False)  # QA B: like ingest, it says what system is
    assert proc.returncode == 1 and "corpus system is the reserved, read-only system corpus" in proc.stderr
    proc = a.cli("rag", "reindex", "--corpus", "family", check=False)  # row 17: A does not host it
    assert proc.returncode == 1 and f"is hosted on b ({b.node_id}): run 'hearthnet rag reindex" in proc.stderr
    # ask, one corpus of two unknown: the answer, and one note saying which was left out and why
    asked = c.cli("ask", "When is the boiler serviced?", "--corpus", "family", "--corpus", "no-such")
    notes = [x for x in asked.stdout.splitlines() if x.startswith("(")]
    assert "(left out: no corpus 'no-such'; `hearthnet corpora` lists them)" in notes, asked.stdout
    assert not [x for x in notes if "no passage" in x or "not searched" in x], notes
    assert asked.stdout.lower().count("no language model is reachable") == 1
    sources = asked.stdout.split("Sources:\n", 1)[1].splitlines()
    assert sources and len(sources) == len(set(s.split("] ", 1)[1] for s in sources if "] " in s)) + (
        sources[-1].startswith("… and ")
    )  # one line per file and page

    b.stop()
    wait_for(lambda: b.node_id not in a.peer_ids() | c.peer_ids(), timeout=30, what="A and C to see B go")
    proc = c.cli("query", "boiler", "--corpus", "family", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"hearthnet: partition: corpus 'family' is hosted on b ({b.node_id}), ")
    assert "which is offline since " in proc.stderr and " ago)" in proc.stderr
    # ask: the named corpus's host is offline: said as query says it, exit 1, nothing on stdout
    asked = c.cli("ask", "boiler", "--corpus", "family", check=False)
    assert asked.returncode == 1 and asked.stdout == ""
    assert asked.stderr.startswith(f"hearthnet: partition: corpus 'family' is hosted on b ({b.node_id}), ")
    assert "which is offline since " in asked.stderr and len(asked.stderr.splitlines()) == 1
    # every corpus: none left that C reaches, and the offline one is named
    asked = c.cli("ask", "When is the boiler serviced?", check=False)
    assert asked.returncode == 1 and asked.stdout == "", asked.stdout
    assert asked.stderr.startswith(
        "hearthnet: not_found: nothing to answer from: no language model and no corpus are reachable "
        f"(corpus 'family' is hosted on b ({b.node_id}), which is offline since "
    ), asked.stderr
    asked = c.cli("ask", "--no-rag", "hello", check=False)
    assert asked.returncode == 1 and "no language model is reachable in the mesh" in asked.stderr
    listed = c.cli("corpora")  # row 15: was "(no corpora in the mesh)"
    assert listed.returncode == 0
    (line,) = [x for x in listed.stdout.splitlines() if x.startswith("family ")]
    short = b.node_id.partition(":")[2][:12]
    assert f"b ({short})" in line and "(OFFLINE since " in line and " ago)" in line and "3 docs" in line
    known = next(x for x in c.cli_json("corpora")["corpora"] if x["name"] == "family")
    assert known["offline"] is True and known["node"] == b.node_id and known["last_seen"] > 0
    c.stop()  # C remembers when it last saw B (peers.json), across its own restart
    c.start()
    c.wait_ready()
    again = next(x for x in c.cli_json("corpora")["corpora"] if x["name"] == "family")
    assert again["last_seen"] == pytest.approx(known["last_seen"], abs=1e-3)
    # with its host offline, the name is still taken: no second family behind its back
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nThe spare key is under the blue pot.\n")
    proc = a.cli("ingest", str(note), "--corpus", "family", check=False)
    assert (
        proc.returncode == 1 and "already exists on node b" in proc.stderr and "offline since" in proc.stderr
    )


def test_a_mistyped_corpus_name_is_said_to_be_new_with_the_name_it_may_mean(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    """Last: it makes a corpus ``famly``."""
    a, _, _ = nodes(mesh)
    empty = tmp_path / "empty.md"
    empty.write_text("")  # refused by the node: nothing is made, nothing said of a new corpus
    proc = a.cli("ingest", str(empty), "--corpus", "famly", check=False)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "new corpus" not in proc.stdout
    note = tmp_path / "shed.md"
    note.write_text("# Shed\n\nThe lawnmower is serviced in April.\n")
    out = a.cli("ingest", str(note), "--corpus", "famly").stdout.splitlines()[-1]
    said = "; famly is a new corpus: no node of the community held it before (did you mean family?)"
    assert out.endswith(said), out
    again = a.cli_json("ingest", str(note), "--corpus", "famly")
    assert again["new_corpus"] is False and "new corpus" not in again["summary"]
