"""Every format of the registry through a real node (issue 35 item 1): each document, made by its
format's library from the shared Walden text (or the shared scan, for images), is ingested with
``hearthnet ingest`` into its own corpus; a question answered from it (``answer.ask``, no model:
the extractive answer) cites the passage's place: section and paragraph, slide, sheet and row,
message; an image's text is read by the node's ``ocr.page``.  A broken file of each format is a
one-line refusal of the ingest, the node going on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.contracts import formats
from hearthnet.testing import LocalMesh, MeshNode
from tests.format_documents import MAKERS, SCAN_QUESTION, make, question

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hearth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshNode]:
    mesh = LocalMesh(tmp_path_factory.mktemp("formats"))
    try:
        node = mesh.add("hearth")
        mesh.found(node)
        yield node
    finally:
        mesh.close()


def ask(node: MeshNode, question: str, corpus: str) -> dict[str, Any]:
    inp = {"question": question, "corpora": [corpus]}
    out: dict[str, Any] = node.cli_json("call", "answer.ask", "--input", json.dumps(inp), timeout=300)[
        "output"
    ]
    return out


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_question_is_answered_from_each_format_citing_its_place(
    hearth: MeshNode, tmp_path: Path, name: str
) -> None:
    made = make(name, tmp_path)
    corpus = f"f-{name}"
    result = hearth.cli_json("ingest", str(made.path), "--corpus", corpus, timeout=600)
    assert [r["ok"] for r in result["results"]] == [True], result
    image = formats.by_name(name).image
    out = ask(hearth, SCAN_QUESTION if image else question(), corpus)
    assert out["mode"] == "extractive" and out["sources"], out
    top = out["sources"][0]
    assert top["file"] == made.path.name and top["place"] == made.place, top
    assert (
        made.phrase in top["text"]
        if image
        else made.phrase[:30] in " ".join(s["text"] for s in out["sources"] if s["place"] == made.place)
    )
    anchor = top["anchor"]
    page = made.metadata["page"]
    shown = "unit" not in made.metadata and formats.by_name(name).inline  # the browser opens the original
    assert anchor == f"page={page}" if shown else anchor.startswith(f"u{page}")
    hits = hearth.cli_json("query", made.phrase, "--corpus", corpus, "-k", "1", timeout=300)
    meta = hits["chunks"][0]["metadata"]
    assert {k: meta.get(k) for k in made.metadata} == made.metadata


def test_an_e_mails_attachment_is_a_document_of_its_own(hearth: MeshNode, tmp_path: Path) -> None:
    made = make("eml", tmp_path)
    proc = hearth.cli("ingest", str(made.path), "--corpus", "mail", timeout=600)
    assert f"attached {made.extra['attachment']}: 1 chunk" in proc.stdout, proc.stdout
    docs = hearth.cli_json("call", "rag.list_documents", "--params", json.dumps({"corpus": "mail"}))
    names = sorted(d.get("filename") for d in docs["output"]["documents"])
    assert names == ["beans.txt", "walden.eml"], docs
    hits = hearth.cli_json(
        "query", "How large is the bean field?", "--corpus", "mail", "-k", "1", timeout=300
    )
    top = hits["chunks"][0]
    assert "2.5 acres" in top["text"] and top["metadata"]["doc_filename"] == "beans.txt"
    message = next(d for d in docs["output"]["documents"] if d.get("filename") == "walden.eml")
    assert top["metadata"]["attached_to"] == message["doc_cid"]


def test_a_broken_file_of_a_format_is_a_one_line_refusal(hearth: MeshNode, tmp_path: Path) -> None:
    broken = []
    for name in ("docx", "xlsx", "epub", "pptx", "odt", "png"):
        made = make(name, tmp_path)
        data = made.path.read_bytes()
        path = tmp_path / f"broken-{made.path.name}"
        path.write_bytes(data[: len(data) // 2])
        broken.append((formats.by_name(name), path))
    proc = hearth.cli(
        "ingest", *(str(p) for _, p in broken), "--corpus", "broken", "--json", check=False, timeout=300
    )
    results = json.loads(proc.stdout)["results"]
    assert [r["ok"] for r in results] == [False] * len(broken)
    for (fmt, _), r in zip(broken, results, strict=True):
        assert r["error"] == "bad_request" and f"not a readable {fmt.label}" in r["message"], r
        assert "\n" not in r["message"] and "Traceback" not in proc.stderr
    assert hearth.cli_json("status")["node_id"] == hearth.node_id  # the node goes on
