"""Chunks of pages with almost no text (a cover, a notice, a table of contents) are marked at
chunking and ranked below content by ``rag.query`` (their cosine kept)."""

from __future__ import annotations

import dataclasses

from hearthnet.services.rag.ingest.chunk import chunk_document
from hearthnet.services.rag.ingest.read import read_document
from hearthnet.services.rag.low_text import LOW_TEXT, LOW_TEXT_WEIGHT, demoted, kept_by_words, low_text_page
from hearthnet.services.rag.results import Hit
from tests.unit.services.rag.ingest.test_columns import pages_of

PROSE = (
    "When first I took up my abode in the woods, that is, began to spend my nights as well as days "
    "there, which, by accident, was on Independence Day, or the Fourth of July, 1845, my house was not "
    "finished for winter, but was merely a defence against the rain, without plastering or chimney. "
) * 2


def test_covers_notices_and_contents_are_low_text_and_prose_is_not() -> None:
    assert low_text_page("WALDEN\n\nBY\nHENRY DAVID THOREAU\n\n1854")
    assert low_text_page("Walden By Henry David Thoreau\nThis edition was created by Global Grey\n©2018")
    contents = "CONTENTS\nEconomy\nWhere I Lived, And What I Lived For\nReading\nSounds\nSolitude\n" * 4
    assert low_text_page(contents)
    index = "\n".join(f"Amended return {n}\nAddress change {n + 3}" for n in range(20))
    assert low_text_page(index)
    assert not low_text_page(PROSE)
    assert not low_text_page("他说了很多话。" * 40)  # CJK prose: characters count
    assert low_text_page("")


def test_walden_s_first_pages_are_marked_and_its_text_is_not() -> None:
    doc = read_document(pages_of("en_walden_thoreau_249p.pdf", [2, 3, 4, 5, 65]))
    chunks = chunk_document(doc, doc_cid="blake3:w", doc_title="Walden", language="en", max_tokens=256)
    marked = {c.metadata["page"] for c in chunks if c.metadata.get(LOW_TEXT)}
    assert marked == {1, 2, 3}  # title, notice, contents
    assert all(LOW_TEXT not in c.metadata for c in chunks if c.metadata["page"] in (4, 5))


def hit(cid: str, score: float, *, low: bool = False, similarity: float | None = None) -> Hit:
    meta = {"doc_cid": "d", LOW_TEXT: True} if low else {"doc_cid": "d"}
    return Hit(chunk_id=cid, text=None, metadata=meta, score=score, similarity=similarity)


def test_a_marked_chunk_ranks_below_content_and_keeps_its_cosine() -> None:
    hits = [hit("title", 0.59, low=True), hit("a", 0.43), hit("b", 0.40), hit("c", 0.20)]
    out = demoted(hits, 3)
    assert [h.chunk_id for h in out] == ["a", "b", "title"]
    title = out[2]
    assert title.score == 0.59 * LOW_TEXT_WEIGHT and title.similarity == 0.59
    fused = demoted([hit("t", 0.03, low=True, similarity=0.7), hit("x", 0.02, similarity=0.5)], 5)
    assert [h.chunk_id for h in fused] == ["x", "t"] and fused[1].similarity == 0.7
    negative = demoted([hit("t", -0.1, low=True), hit("x", -0.15)], 2)
    assert [h.chunk_id for h in negative] == ["x", "t"]  # a negative score goes further down
    assert demoted([dataclasses.replace(hits[1])], 5) == [hits[1]]  # content is left as it is


def test_a_page_of_labels_holding_a_term_the_question_names_exactly_is_not_demoted() -> None:
    """A data model's diagram page (labels, no sentence) is marked low_text; asked for one of its
    identifiers, the keyword leg found it, and it keeps its rank (issue 34's demotion must not lose
    the exact terms hybrid search finds)."""
    rows = [hit("diagram", 0.5, low=True)]
    hits = [hit("diagram", 0.5, low=True), hit("prose", 0.3)]
    for mode, question in (("hybrid", "What is a HydroJunction?"), ("hybrid", "What does § 25.1581 say?")):
        kept = kept_by_words(mode, question, rows)
        assert [h.chunk_id for h in demoted(hits, 2, kept=kept)] == ["diagram", "prose"]
    assert kept_by_words("keyword", "what is the water", rows) == {"diagram"}  # the asker chose words
    for mode, question in (
        ("hybrid", "When did Thoreau go to live in the woods?"),
        ("dense", "HydroJunction"),
    ):
        kept = kept_by_words(mode, question, rows)
        assert [h.chunk_id for h in demoted(hits, 2, kept=kept)] == ["prose", "diagram"]
    assert kept_by_words("hybrid", "HydroJunction", None) == frozenset()  # no keyword index
