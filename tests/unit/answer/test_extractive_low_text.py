"""An extractive answer quotes a title page (a chunk marked ``low_text``) only when no other chunk
has a sentence to quote: the page that answers is quoted, not the cover whose words match."""

from __future__ import annotations

from hearthnet.answer.extractive import candidates
from hearthnet.answer.hits import Hit
from hearthnet.contracts.rag import LOW_TEXT


def hit(cid: str, text: str, *, low: bool = False) -> Hit:
    meta = {"doc_cid": "blake3:w", "page": 1, LOW_TEXT: True} if low else {"doc_cid": "blake3:w", "page": 65}
    return Hit(cid, text, 0.5, "walden", "node", "m", 1, meta)


def test_a_title_pages_sentences_are_left_out_while_content_has_some() -> None:
    title = hit("t", "WALDEN BY HENRY DAVID THOREAU 1854, life in the woods", low=True)
    page = hit("p", "When first I took up my abode in the woods, that was on Independence Day, 1845.")
    assert [s.hit.chunk_id for s in candidates([title, page])] == ["p"]
    assert [s.hit.chunk_id for s in candidates([title])] == ["t"]  # nothing else: the title it is
    assert [s.hit.chunk_id for s in candidates([title, hit("x", "too short")])] == ["t"]


def test_a_long_sentence_is_also_scored_by_its_leading_clauses() -> None:
    from hearthnet.answer.extractive import LONG_SENTENCE_CHARS, MIN_CLAUSE_CHARS, leading_clauses

    long = (
        "When first I took up my abode in the woods, that is, began to spend my nights as well as "
        "days there, which, by accident, was on Independence Day, or the Fourth of July, 1845, my "
        "house was not finished for winter, but was merely a defence against the rain."
    )
    heads = leading_clauses(long)
    assert heads and all(long.startswith(h) and h.endswith(",") for h in heads)
    assert all(MIN_CLAUSE_CHARS <= len(h) <= LONG_SENTENCE_CHARS for h in heads) and len(heads) <= 3
    assert leading_clauses("A short sentence, with a comma, stays whole.") == []
