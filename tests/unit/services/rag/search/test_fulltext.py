"""The keyword index's tokenisation and queries on a real SQLite FTS5 table: case, diacritics and
full-width forms folded, CJK found by character phrases, any query text safe to match."""

# ruff: noqa: RUF001  (full-width letters are what some tests are about)

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.services.rag.search import fulltext
from hearthnet.services.rag.search.filters import build_where, compile_where

TEXTS = {
    "de": "Herr Müller prüft die Heizungsanlage im Frühjahr.",
    "fr": "Le résumé du règlement CE 1272/2008 est à la page 3.",
    "pl": "Zażółć gęślą jaźń — Łódź.",
    "vi": "Tiếng Việt có dấu.",
    "zh": "东京都的季度报告显示营业收入增长。",
    "ja": "東京都庁はカタカナとひらがなを使う。",
    "ko": "서울특별시의 인구는 약 천만 명이다.",
    "part": "Replace filter part no. XJ-9000/B and gasket W-2 every 12 months.",
    "wide": "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ１２３ letters.",
    "snake": "the field doc_filename is kept",
    "da": "Søren går på Straße, Æbleø.",
}


@pytest.fixture
def db() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(fulltext.SCHEMA)
    fulltext.create_index(conn, "c")
    for name, text in TEXTS.items():
        fulltext.add_document(conn, "c", name, [name], [text], [{"doc_cid": name, "lang": name[:2]}])
    yield conn
    conn.close()


def hits(db: sqlite3.Connection, query: str, corpus: str = "c") -> list[str]:
    expression = fulltext.match_expression(query)
    return [] if expression is None else [r.chunk_id for r in fulltext.search(db, corpus, expression, 10)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("muller", "de"),  # diacritics folded (remove_diacritics 2)
        ("MÜLLER", "de"),
        ("fruhjahr", "de"),
        ("resume reglement", "fr"),
        ("Résumé", "fr"),
        ("zazolc gesla jazn", "pl"),
        ("lodz", "pl"),  # Ł has no decomposition; unicode61 folds it all the same
        ("tieng viet", "vi"),
        ("ABC123", "wide"),  # NFKC: full-width letters and digits are the ASCII ones
        ("ｆｕｌｌ", "wide"),
        ("XJ-9000/B", "part"),
        ("w-2", "part"),
        ("1272/2008", "fr"),
        ("doc_filename", "snake"),
        ("soren strasse aebleo", "da"),
        ("STRASSE", "da"),
    ],
)
def test_latin_text_is_found_without_case_or_diacritics(
    db: sqlite3.Connection, query: str, expected: str
) -> None:
    assert hits(db, query)[:1] == [expected]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("东京", "zh"),  # two characters: FTS5's trigram tokenizer could not find it
        ("季度报告", "zh"),
        ("收入", "zh"),
        ("東京都庁", "ja"),
        ("カタカナ", "ja"),
        ("서울", "ko"),
        ("인구는", "ko"),
    ],
)
def test_cjk_words_are_found_as_character_phrases(db: sqlite3.Connection, query: str, expected: str) -> None:
    assert hits(db, query) == [expected]


def test_cjk_characters_out_of_order_are_not_a_phrase(db: sqlite3.Connection) -> None:
    assert hits(db, "京东") == []  # the characters of 东京, in the other order: no match
    assert hits(db, "报告季度") == []


def test_index_text_sets_cjk_characters_apart_and_normalises() -> None:
    assert fulltext.index_text("东京abc") == " 东  京 abc"
    assert fulltext.index_text("Ｗ－２") == "W-2"


@pytest.mark.parametrize(
    ("query", "expression"),
    [
        ("W-2 form", '"W-2" OR "form"'),
        ('say "hello" NEAR(a b) OR x*', '"say" OR """hello""" OR "NEAR(a" OR "b)" OR "OR" OR "x*"'),
        ("§ 12", '"12"'),
        ("东京都", '"东  京  都"'),
        ("Straße", '"Strasse"'),
        ("?! -- ...", None),
        ("", None),
    ],
)
def test_match_expression_quotes_every_word(query: str, expression: str | None) -> None:
    assert fulltext.match_expression(query) == expression


def test_a_query_uses_at_most_the_first_terms() -> None:
    words = " ".join(f"w{i}" for i in range(100))
    expression = fulltext.match_expression(words)
    assert expression is not None and expression.count(" OR ") == fulltext.MAX_QUERY_TERMS - 1


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_no_query_text_is_an_fts5_syntax_error(query: str) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(fulltext.SCHEMA)
    fulltext.create_index(conn, "c")
    fulltext.add_document(conn, "c", "d", ["d"], [query], [{}])
    expression = fulltext.match_expression(query)
    if expression is not None:
        found = fulltext.search(conn, "c", expression, 5)  # never raises
        assert [r.chunk_id for r in found] == ["d"]  # the text finds itself
    conn.close()


def test_the_filter_is_applied_while_walking_the_ranking(db: sqlite3.Connection) -> None:
    matches = compile_where(build_where({"lang": "fr"}))
    got = fulltext.search(db, "c", '"la" OR "die" OR "the"', 10, matches=matches)
    assert [r.chunk_id for r in got] == ["fr"]
    assert got[0].metadata == {"doc_cid": "fr", "lang": "fr"} and got[0].bm25 > 0


def test_removed_documents_are_not_found_and_corpora_are_apart(db: sqlite3.Connection) -> None:
    fulltext.create_index(db, "other")
    fulltext.add_document(db, "other", "x", ["x"], ["Müller elsewhere"], [{}])
    assert hits(db, "muller") == ["de"]
    assert hits(db, "muller", "other") == ["x"]
    fulltext.remove_document(db, "c", "de")
    assert hits(db, "muller") == []
    assert hits(db, "muller", "other") == ["x"]
    assert db.execute("SELECT COUNT(*) FROM keyword_chunks WHERE doc_cid = 'de'").fetchone() == (0,)
    fulltext.drop_index(db, "other")
    assert not fulltext.has_index(db, "other")
    assert db.execute("SELECT COUNT(*) FROM keyword_chunks WHERE corpus = 'other'").fetchone() == (0,)


def test_a_selective_filter_looks_deeper_than_the_first_matches() -> None:
    """The first look covers the best 8 x k matches; chunks the filter keeps further down are still
    found (up to ``max_scanned``), and not beyond it."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(fulltext.SCHEMA)
    fulltext.create_index(conn, "c")
    for i in range(100):  # the more "pump", the better the BM25: rare ones rank last
        fulltext.add_document(conn, "c", f"d{i}", [f"d{i}"], ["pump " * (100 - i) + "x"], [{"rare": i >= 95}])
    matches = compile_where(build_where({"rare": True}))
    got = fulltext.search(conn, "c", '"pump"', 2, matches=matches)
    assert [r.chunk_id for r in got] == ["d95", "d96"]
    assert fulltext.search(conn, "c", '"pump"', 2, matches=matches, max_scanned=50) == []
    conn.close()
