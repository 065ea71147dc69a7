"""``hearthnet ask --attach FILE``: a document added to one chat session, on a real node process.

Node ``hearth`` (embedding, RAG) hosts the corpus ``heating`` (the demo heating handbook).  A
real shared PDF (the NAACL 2006 paper on Preemptive Information Extraction) is attached to one
session: its passages answer that session's question, cited like a corpus's, while no corpus
gains a document and another session never sees it; deleting the session deletes them.
A broken or hostile file is refused with the reader's own error, and nothing is kept.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.testing import LocalMesh, MeshNode
from tests.shared_data import PDF_DIR

DEMO = Path(__file__).resolve().parents[2] / "hearthnet" / "demo"
PAPER = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
QUESTION = "What does Unrestricted Relation Discovery discover from texts?"
SESSION = f"attach-{__import__('os').getpid()}"


@pytest.fixture(scope="module")
def hearth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshNode]:
    m = LocalMesh(tmp_path_factory.mktemp("attach"))
    m.env["HEARTHNET_OCR"] = "0"
    try:
        node = m.add("hearth")
        m.found(node)
        node.cli_json("ingest", str(DEMO / "heating_handbook.pdf"), "--corpus", "heating", timeout=300)
        yield node
    finally:
        m.close()


def ask(node: MeshNode, *args: str) -> dict:
    proc = node.cli("ask", *args, "--json", "--no-cache", timeout=600)
    return dict(json.loads(proc.stdout))


def corpora(node: MeshNode) -> dict[str, tuple[int, int]]:
    listed = node.cli_json("call", "rag.list_corpora", timeout=60)["output"]["corpora"]
    return {c["name"]: (c["docs"], c["chunks"]) for c in listed}


def attached_rows(node: MeshNode) -> int:
    with sqlite3.connect(node.home / "answer.sqlite3") as db:
        return int(db.execute("SELECT COUNT(*) FROM attached_chunks").fetchone()[0])


def test_an_attached_pdf_answers_its_session_only_and_goes_with_it(hearth: MeshNode) -> None:
    before = corpora(hearth)
    out = ask(hearth, QUESTION, "--session", SESSION, "--attach", str(PAPER))
    assert out["session"] == SESSION
    cited = [s for s in out["sources"] if s.get("cited")]
    assert cited, out["answer"]
    assert {s["file"] for s in cited} == {PAPER.name}, cited
    assert all(s["corpus"] == "chat:attached" for s in cited)
    assert out["meta"]["corpora"]["chat:attached"]["status"] == "ok"
    assert "heating" in out["meta"]["corpora"]  # searched together with the global corpora
    # the marker of a cited passage is in the answer, as any corpus's
    assert any(f"#{s['chunk_id']}]" in out["answer"] for s in cited)
    assert corpora(hearth) == before  # no corpus gained a document
    held = hearth.cli_json("sessions", "show", SESSION)["attachments"]
    assert [a["name"] for a in held] == [PAPER.name]
    assert held[0]["pages"] == 8 and held[0]["chunks"] > 0
    shown = hearth.cli("sessions", "show", SESSION).stdout
    assert f"attached: {PAPER.name} (8 pages, {held[0]['chunks']} passages)" in shown

    other = ask(hearth, QUESTION, "--new-session")  # another chat: the paper is not there
    assert "chat:attached" not in other["meta"]["corpora"]
    assert all(s["file"] != PAPER.name for s in other["sources"])

    human = hearth.cli("ask", "Who are the authors of the paper?", "--session", SESSION, timeout=600)
    assert "chat:attached" in human.stdout and PAPER.name in human.stdout  # the sources name it

    hearth.cli_json("sessions", "delete", SESSION)
    assert attached_rows(hearth) == 0  # the passages and vectors went with the session
    gone = hearth.cli("sessions", "show", SESSION, check=False)
    assert gone.returncode == 1 and "not_found" in gone.stderr
    again = ask(hearth, QUESTION, "--session", SESSION)  # the same id, a new session: nothing attached
    assert "chat:attached" not in again["meta"]["corpora"]
    assert all(s["file"] != PAPER.name for s in again["sources"])


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("corrupt_header_only.pdf", "bad_request"),
        ("encrypted_password_openpassword.pdf", "password"),
        ("scanned_image_only_no_text.pdf", "no text layer"),
    ],
)
def test_a_broken_file_is_refused_and_nothing_is_kept(hearth: MeshNode, name: str, says: str) -> None:
    session = f"{SESSION}-bad-{name[:8]}"
    proc = hearth.cli("ask", QUESTION, "--session", session, "--attach", str(PDF_DIR / name), check=False)
    assert proc.returncode == 1, proc.stdout
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    gone = hearth.cli("sessions", "show", session, check=False)
    assert gone.returncode == 1 and "not_found" in gone.stderr


def test_a_file_over_the_bound_is_refused_before_it_is_sent(hearth: MeshNode, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"word " * (2 * 1024 * 1024))  # 10 MiB
    proc = hearth.cli("ask", QUESTION, "--attach", str(big), check=False)
    assert proc.returncode == 1
    assert "at most 8,388,608" in proc.stderr


def test_no_rag_with_an_attachment_answers_from_the_file_alone(hearth: MeshNode) -> None:
    out = ask(hearth, QUESTION, "--no-rag", "--attach", str(PAPER))
    assert set(out["meta"]["corpora"]) == {"chat:attached"}  # the corpus "heating" was not asked
    cited = [s for s in out["sources"] if s.get("cited")]
    assert cited and {s["file"] for s in cited} == {PAPER.name}
    hearth.cli_json("sessions", "delete", out["session"])
