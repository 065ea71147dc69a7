"""``ocr.page`` across real node processes: a node without OCR has its pages read by a peer.

A: founder, serves ocr.page and embed.text (no RAG).
B: trusted, runs RAG with OCR and the embedder off (``HEARTHNET_OCR=0``), holds the scans: its
   ingest of a scan sends the page to A's OCR and its chunks to A's embedder.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from hearthnet.client import Client
from hearthnet.services.ocr.pages import render_pdf_page
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

SCANNED = PDF_DIR / "scanned_image_only_no_text.pdf"
VICKSBURG = PDF_DIR / "scanned_with_ocr_text_layer.pdf"


def ocr_providers(node: MeshNode) -> set[str]:
    return {c["node"] for c in node.status()["capabilities"] if c["capability"] == "ocr.page@1.0"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("ocr"))
    try:
        a = m.add("a", env={"HEARTHNET_RAG": "0"})
        b = m.add("b", env={"HEARTHNET_OCR": "0", "HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.wait_full_mesh(timeout=60)
        wait_for(lambda: ocr_providers(b) == {a.node_id}, timeout=60, what="B to see A's ocr.page")
        wait_for(
            lambda: any(c["capability"] == "embed.text@1.0" for c in b.status()["capabilities"]),
            timeout=60,
            what="B to see A's embedder",
        )
        yield m
    finally:
        m.close()


def put(node: MeshNode, path: object) -> str:
    doc_cid: str = node.cli_json("file", "put", str(path))["doc_cid"]
    return doc_cid


def test_a_scanned_pdf_held_by_b_is_read_by_a_through_the_bus(mesh: LocalMesh) -> None:
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    doc_cid = put(b, SCANNED)
    inp = json.dumps({"doc_cid": doc_cid, "page": 1})
    result = b.cli_json("call", "ocr.page", "--input", inp, "--timeout", "180", timeout=240)
    assert result["provider"] == a.node_id  # B has no OCR: the bus routed the page to A
    text = result["output"]["text"]
    for words in ("tip-toeing", "widow's garden", "Miss Watson", "THEY TIP-TOED ALONG"):
        assert words in text, words
    assert result["meta"]["page"] == 1 and result["meta"]["page_count"] == 1
    assert result["meta"]["dpi"] == 200.0
    # A fetched the blob from B (the caller) to render it
    assert any(blob["doc_cid"] == doc_cid for blob in a.cli_json("file", "ls")["blobs"])


def test_a_page_image_sent_by_a_program_on_b_is_read_by_a(mesh: LocalMesh) -> None:
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    out = io.BytesIO()
    render_pdf_page(VICKSBURG.read_bytes(), 2, 200).image.save(out, "JPEG", quality=80)
    result = Client(b.home).call("ocr.page", input={"image": out.getvalue()}, timeout=180)
    assert result.provider == a.node_id
    for words in ("Sibley Tent", "96th Ohio", "thirteen dollars"):
        assert words in result.output["text"], words
    assert (result.meta["width"], result.meta["height"]) == (1200, 1800)


def test_a_page_past_the_end_is_one_line_bad_request(mesh: LocalMesh) -> None:
    b = mesh.nodes["b"]
    doc_cid = put(b, SCANNED)
    proc = b.cli("call", "ocr.page", "--input", json.dumps({"doc_cid": doc_cid, "page": 5}), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("hearthnet: bad_request: page 5 is out of range: the PDF has 1 page(s)"), (
        proc.stderr
    )


def test_a_scan_ingested_on_b_is_read_by_a_and_a_question_finds_its_page(mesh: LocalMesh) -> None:
    """The issue's proof: B has no OCR; its ingest of the scanned PDF sends the page to A's."""
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    before = ocr_calls(a)
    proc = b.cli("ingest", str(SCANNED), "--corpus", "books", "--json", timeout=600)
    result = json.loads(proc.stdout)["results"][0]
    assert result["ok"] and result["node"] == b.node_id, result
    assert result["ocr_pages"] == [1] and result["chunks_indexed"] >= 2
    assert ocr_calls(a) == before + 1
    answer = a.cli_json("query", "Who was sitting in the kitchen door?", "--corpus", "books", "-k", "1")
    assert answer["provider"] == b.node_id  # A has no RAG: the bus routed the question to B
    top = answer["chunks"][0]
    assert "Jim, was setting in the kitchen door" in top["text"]
    assert top["metadata"]["page"] == 1 and top["metadata"]["ocr"] is True


def ocr_calls(node: MeshNode) -> int:
    stats = node.cli_json("call", "node.stats", timeout=10)["output"]["capabilities"]
    return int(stats.get("ocr.page@1.0", {}).get("calls", 0))


def test_a_personal_scan_is_never_sent_to_a_peers_ocr(mesh: LocalMesh, tmp_path: Path) -> None:
    """A personal document is private: with no OCR of its own, B refuses it as before."""
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    own = tmp_path / "my_scan.pdf"  # the scanned page written anew: bytes no node holds yet
    writer = PdfWriter()
    writer.add_page(PdfReader(SCANNED).pages[0])
    with own.open("wb") as f:
        writer.write(f)
    before = ocr_calls(a)
    proc = b.cli("ingest", str(own), "--corpus", "personal", "--json", check=False, timeout=300)
    result = json.loads(proc.stdout)["results"][0]
    assert proc.returncode == 1 and result["error"] == "bad_request", result
    assert "no text layer on any of 1 pages: run OCR first" in result["message"]
    assert ocr_calls(a) == before


def test_a_scan_among_small_files_is_read_by_ocr_in_their_batch(mesh: LocalMesh, tmp_path: Path) -> None:
    """Small files are ingested together (one ``rag.ingest {documents}``): a scan among them goes
    to OCR as it would alone, and its entry names its OCR'd page."""
    a, b = mesh.nodes["a"], mesh.nodes["b"]
    folder = tmp_path / "letters"
    folder.mkdir()
    writer = PdfWriter()  # the scanned page written anew: bytes no node holds yet
    writer.add_page(PdfReader(SCANNED).pages[0])
    with (folder / "scan.pdf").open("wb") as f:
        writer.write(f)
    (folder / "note.txt").write_text("The attic window sticks in damp weather.\n", encoding="utf-8")
    before = ocr_calls(a)
    proc = b.cli("ingest", str(folder), "--corpus", "letters", "--json", timeout=600)
    results = {Path(r["path"]).name: r for r in json.loads(proc.stdout)["results"]}
    assert results["scan.pdf"]["ok"] and results["scan.pdf"]["ocr_pages"] == [1], results
    assert results["note.txt"]["ok"] and results["note.txt"]["ocr_pages"] == []
    assert ocr_calls(a) == before + 1
    answer = b.cli_json("query", "Who was sitting in the kitchen door?", "--corpus", "letters", "-k", "1")
    assert answer["chunks"][0]["metadata"]["page"] == 1 and answer["chunks"][0]["metadata"]["ocr"] is True
