"""The keyword index of each corpus: SQLite FTS5 tables in the store's ledger database, so a
document's keyword rows are written and deleted in the same transactions that make it complete or
start deleting it (a document is in both indexes or in neither, even across ``kill -9``).

Tokenisation: FTS5's ``unicode61`` tokenizer with ``remove_diacritics 2`` (case and diacritics
folded: ``Müller`` = ``muller``, ``résumé`` = ``resume``) after NFKC normalisation (full-width
``\uff21\uff11`` = ``a1``; ``Łódź`` = ``lodz``, ``Straße`` = ``strasse``).
Han, kana and Hangul have no spaces between words, so before indexing
each such character becomes a token of its own, and a query's run of them is a phrase of those
characters: ``東京`` finds ``東京都`` (character n-grams matched as a phrase; FTS5's trigram
tokenizer would need three characters, and most Chinese words have two).

Pure SQL over a connection the caller owns (the ledger, under the store's lock, for writes; a
read connection of its own per thread for searches); no I/O of its own.
"""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearthnet.contracts.rag import is_corpus_name

__all__ = [
    "COMMON_CHUNKS",
    "MAX_QUERY_TERMS",
    "SCHEMA",
    "TOKENIZER",
    "KeywordRow",
    "Matches",
    "add_document",
    "create_index",
    "drop_index",
    "has_index",
    "index_text",
    "match_expression",
    "remove_document",
    "search",
    "single_tokens",
    "table_name",
    "too_common",
]

TOKENIZER = "unicode61 remove_diacritics 2"
Matches = Callable[[Mapping[str, Any]], bool]
"""A filter as a predicate on a chunk's metadata (``filters.compile_where``)."""
MAX_QUERY_TERMS = 32
"""Words of a query used at most (each an OR branch of the match; more only cost time)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS keyword_corpora (corpus TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS keyword_chunks (
    id INTEGER PRIMARY KEY, corpus TEXT NOT NULL, doc_cid TEXT NOT NULL, chunk_id TEXT NOT NULL,
    body TEXT NOT NULL, metadata TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS keyword_chunks_doc ON keyword_chunks (corpus, doc_cid);
"""
# ``keyword_corpora``: corpora whose keyword index is complete (a corpus from before the index
# existed has none until it is built from ChromaDB).  ``keyword_chunks``: one row per chunk of a
# complete document, its normalised text (``body``, the FTS5 table's external content) and
# metadata as JSON (so the keyword leg can apply a filter without ChromaDB).

_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3040-\u30ff\u3100-\u312f\u3130-\u318f"
    "\u31a0-\u31bf\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK_CHAR = re.compile(f"([{_CJK}])")
_TOKEN = re.compile("[^\\W_]|[\ue000-\uf8ff]")
"""A character ``unicode61`` keeps in a token (a letter, a digit, a private-use character): a word
without one is left out of a query."""
_WORD = re.compile("[^\\W_]+")


def table_name(corpus: str) -> str:
    """The corpus's FTS5 table (corpus names are ``[a-z0-9-]+``: safe inside double quotes)."""
    if not is_corpus_name(corpus):
        raise ValueError(f"not a corpus name: {corpus!r}")
    return f'"keywords:{corpus}"'


_FOLD = str.maketrans(
    {
        "Ł": "L",
        "ł": "l",
        "Ø": "O",
        "ø": "o",
        "Đ": "D",
        "đ": "d",
        "Ħ": "H",
        "ħ": "h",
        "\u0131": "i",  # dotless i
        "ß": "ss",
        "ẞ": "SS",
        "Æ": "AE",
        "æ": "ae",
        "Œ": "OE",
        "œ": "oe",
        "Þ": "TH",
        "þ": "th",
    }
)
"""Latin letters with a stroke or a ligature, which Unicode does not decompose (so ``unicode61``
keeps them): folded like the accented ones, ``Łódź`` = ``lodz``, ``Straße`` = ``strasse``."""


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Control characters: separators to FTS5 anyway, and a NUL would end a query string early."""


def _normal(text: str) -> str:
    return _CONTROL.sub(" ", unicodedata.normalize("NFKC", text).translate(_FOLD))


def index_text(text: str) -> str:
    """``text`` as it is indexed: NFKC-normalised, letters without a decomposition folded, each
    CJK character set apart by spaces."""
    return _CJK_CHAR.sub(r" \1 ", _normal(text))


def folded(word: str) -> str:
    """A one-token word as ``unicode61 remove_diacritics 2`` stores it (lower case, marks
    removed): the key of the vocabulary table."""
    decomposed = unicodedata.normalize("NFD", index_text(word).strip().lower())
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def single_tokens(query: str) -> list[str]:
    """The words of ``query`` that are one token each (a letter-and-digit run), folded: those whose
    document frequency :func:`search` checks."""
    out = []
    for word in query.split():
        text = index_text(word).strip()
        if _WORD.fullmatch(text):
            out.append(folded(word))
    return out


def match_expression(query: str, skip: frozenset[str] = frozenset()) -> str | None:
    """An FTS5 MATCH expression for a free-text ``query``: each word a quoted string (a phrase of
    the tokens FTS5 finds in it), the phrases ORed; ``None`` if no word has a letter or digit.

    ``W-2`` becomes the phrase of ``w`` and ``2``, ``東京都`` that of its three characters; a
    double quote is doubled, so no operator or syntax of FTS5 can come from the query.  One-token
    words in ``skip`` (folded) are left out.
    """
    phrases: list[str] = []
    for word in query.split():
        text = index_text(word).strip()
        if not _TOKEN.search(text) or (skip and _WORD.fullmatch(text) and folded(word) in skip):
            continue
        phrase = '"' + text.replace('"', '""') + '"'
        if phrase not in phrases:
            phrases.append(phrase)
        if len(phrases) == MAX_QUERY_TERMS:
            break
    return " OR ".join(phrases) if phrases else None


# -- writes (the ledger's transactions) ----------------------------------------------------------
def _vocab_name(corpus: str) -> str:
    """The corpus's ``fts5vocab`` table: each term and how many chunks have it."""
    return table_name(corpus)[:-1] + ':vocab"'


def create_index(db: sqlite3.Connection, corpus: str) -> None:
    """Create the corpus's (empty) index and mark it complete."""
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table_name(corpus)} USING fts5("
        f"body, content='keyword_chunks', content_rowid='id', tokenize='{TOKENIZER}')"
    )
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {_vocab_name(corpus)} "
        f"USING fts5vocab('{table_name(corpus).strip(chr(34))}', 'row')"
    )
    db.execute("INSERT OR IGNORE INTO keyword_corpora VALUES (?)", (corpus,))


def has_index(db: sqlite3.Connection, corpus: str) -> bool:
    return db.execute("SELECT 1 FROM keyword_corpora WHERE corpus = ?", (corpus,)).fetchone() is not None


def drop_index(db: sqlite3.Connection, corpus: str) -> None:
    """Remove the corpus's index and rows (the corpus is gone, or its index is rebuilt)."""
    db.execute(f"DROP TABLE IF EXISTS {_vocab_name(corpus)}")
    db.execute(f"DROP TABLE IF EXISTS {table_name(corpus)}")
    db.execute("DELETE FROM keyword_chunks WHERE corpus = ?", (corpus,))
    db.execute("DELETE FROM keyword_corpora WHERE corpus = ?", (corpus,))


def add_document(
    db: sqlite3.Connection,
    corpus: str,
    doc_cid: str,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]],
) -> None:
    """Index one document's chunks (inside the caller's transaction)."""
    first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM keyword_chunks").fetchone()[0]
    rows = [
        (first + i, corpus, doc_cid, cid, index_text(text), json.dumps(dict(meta), sort_keys=True))
        for i, (cid, text, meta) in enumerate(zip(ids, texts, metadatas, strict=True))
    ]
    db.executemany("INSERT INTO keyword_chunks VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.execute(
        f"INSERT INTO {table_name(corpus)} (rowid, body) SELECT id, body FROM keyword_chunks WHERE id >= ?",
        (first,),
    )


def remove_document(db: sqlite3.Connection, corpus: str, doc_cid: str) -> None:
    """Take one document out of the index (inside the caller's transaction; none is a no-op)."""
    table = table_name(corpus)
    exists = db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table.strip('"'),)).fetchone()
    if exists is not None:  # an index being built has rows too: its entries go with them
        db.execute(
            f"INSERT INTO {table} ({table}, rowid, body) "
            "SELECT 'delete', id, body FROM keyword_chunks WHERE corpus = ? AND doc_cid = ?",
            (corpus, doc_cid),
        )
    db.execute("DELETE FROM keyword_chunks WHERE corpus = ? AND doc_cid = ?", (corpus, doc_cid))


def update_metadata(
    db: sqlite3.Connection, corpus: str, doc_cid: str, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Each of one document's chunks gets the metadata ``change`` makes of its own (inside the
    caller's transaction; its words are not touched)."""
    rows = db.execute(
        "SELECT id, metadata FROM keyword_chunks WHERE corpus = ? AND doc_cid = ?", (corpus, doc_cid)
    ).fetchall()
    db.executemany(
        "UPDATE keyword_chunks SET metadata = ? WHERE id = ?",
        [(json.dumps(change(dict(json.loads(meta))), sort_keys=True), row_id) for row_id, meta in rows],
    )


# -- reads ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeywordRow:
    """One chunk the keyword leg found: its id, document, BM25 score (higher is better) and
    metadata."""

    chunk_id: str
    doc_cid: str
    bm25: float
    metadata: dict[str, Any]


COMMON_CHUNKS = 1000
"""Chunks a word is in, at least, before :func:`too_common` may leave it out for cost (and a
tenth of the corpus): small corpora keep every word that can change a ranking."""


def too_common(db: sqlite3.Connection, corpus: str, terms: Sequence[str], chunks: int) -> frozenset[str]:
    """Those of ``terms`` (folded single tokens) left out of a query: in at least half of the
    corpus's ``chunks``, where FTS5's BM25 gives them an IDF of 1e-6 (``log((N - n + 0.5) / (n +
    0.5)) <= 0``: they change no ranking, yet ``the``, ``der``, ``de`` made every query score every
    chunk), or in a tenth of them and at least :data:`COMMON_CHUNKS` (an IDF of at most 2.2
    against 6-9 for the words that decide; each costs a pass over a thousand chunks or more)."""
    wanted = sorted(set(terms))
    if not wanted or chunks < 1:
        return frozenset()
    rows = db.execute(
        f"SELECT term FROM {_vocab_name(corpus)} "
        f"WHERE term IN ({', '.join('?' * len(wanted))}) AND (doc * 2 >= ? OR (doc * 10 >= ? AND doc >= ?))",
        (*wanted, chunks, chunks, COMMON_CHUNKS),
    ).fetchall()
    return frozenset(str(r[0]) for r in rows)


def search(
    db: sqlite3.Connection,
    corpus: str,
    expression: str,
    limit: int,
    *,
    matches: Matches | None = None,
    max_scanned: int = 4096,
) -> list[KeywordRow]:
    """The ``limit`` chunks of ``corpus`` that best match ``expression`` by BM25 (FTS5's ``bm25``,
    negated so higher is better), best first; with ``matches`` (a metadata predicate), the best
    among those it accepts, looking at no more than ``max_scanned`` matching chunks."""
    if limit < 1:
        return []
    # With a filter, the best 8 x limit first (a filter that keeps one chunk in eight or more is
    # done then), all max_scanned only if that was not enough: FTS5 keeps the LIMIT best in a
    # sorted list, so asking for 4,096 at once cost more than the whole unfiltered search
    depth = limit if matches is None else min(max_scanned, 8 * limit)
    while True:
        out, seen = _ranked_rows(db, corpus, expression, limit, depth, matches)
        if len(out) == limit or seen < depth or depth >= max_scanned:
            return out
        depth = max_scanned


def _ranked_rows(
    db: sqlite3.Connection, corpus: str, expression: str, limit: int, depth: int, matches: Matches | None
) -> tuple[list[KeywordRow], int]:
    """:func:`search` over the best ``depth`` matches: the rows kept, and how many were looked at."""
    table = table_name(corpus)
    # FTS5 ranks alone (``ORDER BY rank`` with a limit keeps only the best); the rows' ids and
    # metadata are then read a page at a time, so a filter stops as soon as it has enough
    ranked = db.execute(
        f"SELECT rowid, rank FROM {table} WHERE {table} MATCH ? ORDER BY rank, rowid LIMIT ?",
        (expression, depth),
    )
    out: list[KeywordRow] = []
    seen = 0
    try:
        while len(out) < limit:
            page = ranked.fetchmany(max(limit, 64))
            if not page:
                break
            seen += len(page)
            ids = [int(r[0]) for r in page]
            found = {
                int(r[0]): r[1:]
                for r in db.execute(
                    "SELECT id, chunk_id, doc_cid, metadata FROM keyword_chunks "
                    f"WHERE id IN ({', '.join('?' * len(ids))})",
                    ids,
                )
            }
            for rowid, rank in page:
                if rowid not in found:
                    continue
                chunk_id, doc_cid, meta = found[rowid]
                metadata = json.loads(meta)
                if matches is not None and not matches(metadata):
                    continue
                out.append(KeywordRow(str(chunk_id), str(doc_cid), -float(rank), metadata))
                if len(out) == limit:
                    break
    finally:
        ranked.close()
    return out, seen
