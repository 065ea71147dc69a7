"""Citations of documents without pages name their place (issue 35): ``hearthnet ask``'s source
lines, ``hearthnet query``'s hit lines and MCP's sources say the section and paragraph, the slide,
the sheet and row; a PDF's stay "page N"."""

from __future__ import annotations

from hearthnet.answer.citations import source_of
from hearthnet.answer.hits import Hit
from hearthnet.answer.prompt import context_line
from hearthnet.config.answer import DEFAULT_CONTEXT_LINE
from hearthnet.frontends.cli.ask import source_lines
from hearthnet.frontends.cli.hits import _source
from hearthnet.frontends.mcp.tools import _sources_text

NODE = "ed25519:Abcdefghijklmnopqrstuvwxyz0123456789"
DOCX = {
    "doc_cid": "blake3:" + "a" * 64,
    "doc_filename": "walden.docx",
    "doc_title": "Walden",
    "page": 2,
    "unit": "section",
    "section": "Walden > Shelter",
    "paragraph": 2,
    "mark_start": 530,
}
SHEET = {"doc_filename": "bills.xlsx", "page": 1, "unit": "sheet", "section": "Bills", "row": 14}


def hit(metadata: dict[str, object]) -> Hit:
    return Hit("c" * 32, "text", 0.5, "house", NODE, "model", 1, metadata)


def test_a_source_says_the_place_and_the_anchor_that_opens_it() -> None:
    out = source_of(hit(DOCX), cited=True)
    assert out["place"] == "Walden > Shelter, paragraph 2" and out["anchor"] == "u2-2"
    assert out["page"] == 2  # the unit's number, as before
    pdf = source_of(hit({"doc_filename": "a.pdf", "page": 7}), cited=False)
    assert (pdf["place"], pdf["anchor"]) == ("page 7", "page=7")
    slide = {"page": 4, "unit": "slide", "section": "Budget"}
    assert source_of(hit(slide), cited=False)["place"] == "slide 4 (Budget)"


def test_the_prompt_names_the_place() -> None:
    line = context_line(DEFAULT_CONTEXT_LINE, hit(DOCX))
    assert line == "- From walden.docx#" + "c" * 32 + ' (Walden > Shelter, paragraph 2): "text"'
    pdf = context_line(DEFAULT_CONTEXT_LINE, hit({"doc_filename": "a.pdf", "page": 7}))
    assert "(page 7)" in pdf


def test_cli_and_mcp_lines_name_the_place() -> None:
    source = {**source_of(hit(DOCX), cited=True), "file": "walden.docx", "title": "Walden"}
    (line,) = source_lines([source], {NODE: "pantry"})
    assert line == "[1] Walden — walden.docx, Walden > Shelter, paragraph 2 — house on pantry  (cited)"
    assert _source(SHEET) == "bills.xlsx, sheet Bills, row 14"
    assert _source({"doc_filename": "a.pdf", "page": 3}) == "a.pdf p.3"
    text = _sources_text({"sources": [source]})
    assert text == "[1] walden.docx#" + "c" * 32 + ", Walden > Shelter, paragraph 2, house (cited)"
