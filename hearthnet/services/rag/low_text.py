"""Chunks that carry almost no text never outrank content: a cover page, a copyright notice, a page
holding a running header and little else, a table of contents or an index.

Such a chunk's few words are often the very words of a question ("Walden", "Thoreau", "woods"),
and a short text's vector lies close to a short question's: its cosine beats the page that answers.
So the chunker marks the chunks of such a page (``low_text: true`` in their metadata,
:func:`low_text_page`), and ``rag.query`` ranks a marked chunk by its score times
:data:`LOW_TEXT_WEIGHT` (:func:`demoted`), looking :data:`LOW_TEXT_SPARE` chunks further to fill
``k``.  Its ``similarity`` stays its cosine (what abstention reads).  A corpus indexed before the
mark ranks as before until it is reindexed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from hearthnet.contracts.rag import LOW_TEXT

__all__ = [
    "LOW_TEXT",
    "LOW_TEXT_SPARE",
    "LOW_TEXT_WEIGHT",
    "LOW_TEXT_WORDS",
    "demoted",
    "exact_terms",
    "kept_by_words",
    "low_text_page",
    "wider",
]

LOW_TEXT_WORDS = 40
"""A page with fewer words is a cover, a notice or a header alone (a CJK character counts half)."""
LOW_TEXT_WEIGHT = 0.5
"""A marked chunk's score is multiplied by this when ranked (its cosine is kept as it is)."""
LOW_TEXT_SPARE = 5
"""Chunks ``rag.query`` asks its store for beyond ``k``, so demoted ones leave no gap."""
_WORD = re.compile(r"[^\W\d_]{2,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_SENTENCE_END = re.compile("[^\\W\\d_][.!?\u3002\uff01\uff1f][\"'\u201d\u2019)\\]]?(?:\\s|$)")
_LISTED = 6
"""Words per line, on average, below which a page without a sentence is a list of headings (a table
of contents, an index), not prose."""


def _words(text: str) -> int:
    return len(_WORD.findall(text)) + len(_CJK.findall(text)) // 2


def low_text_page(text: str) -> bool:
    """Whether a page carries almost no text: fewer than :data:`LOW_TEXT_WORDS` words, or lines of
    headings without a sentence among them (a table of contents, an index)."""
    words = _words(text)
    if words < LOW_TEXT_WORDS:
        return True
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 5 or _SENTENCE_END.search(text):
        return False
    return words / len(lines) < _LISTED


def wider(k: int) -> int:
    """How many chunks to rank for ``k``: a few more, so those demoted leave no gap."""
    return k + LOW_TEXT_SPARE


class _Ranked(Protocol):
    @property
    def chunk_id(self) -> str: ...

    @property
    def score(self) -> float: ...

    @property
    def similarity(self) -> float | None: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


H = TypeVar("H", bound=_Ranked)


_EXACT_TERM = re.compile(r"\w*(?:[a-z][A-Z]|\d)[\w.-]*")
"""A term a question names exactly: a CamelCase identifier (``HydroJunction``) or one with a digit
(``25.1581``, ``P12.1.2``, ``2005-10-04``)."""


def exact_terms(question: str) -> bool:
    """Whether ``question`` names a term exactly: then a page of labels (a data model's diagram,
    a table) that holds it is content, not a cover."""
    return _EXACT_TERM.search(question) is not None


class _Row(Protocol):
    @property
    def chunk_id(self) -> str: ...


def kept_by_words(mode: str, question: str, rows: Sequence[_Row] | None) -> frozenset[str]:
    """The chunks never demoted: every one a ``keyword`` query found (its words are the asker's
    choice), and those the keyword leg of a ``hybrid`` query found when it names a term exactly."""
    if rows is None or mode == "dense" or (mode == "hybrid" and not exact_terms(question)):
        return frozenset()
    return frozenset(r.chunk_id for r in rows)


def demoted(hits: Sequence[H], k: int, *, kept: frozenset[str] = frozenset()) -> list[H]:
    """The ``k`` best of ``hits`` once each marked chunk's score is multiplied by
    :data:`LOW_TEXT_WEIGHT` (its similarity kept: the cosine); the order is otherwise kept.
    Chunks whose id is in ``kept`` (the keyword leg's, for a question naming an exact term) are
    never demoted."""
    out: list[H] = []
    for hit in hits:
        if hit.metadata.get(LOW_TEXT) is True and hit.chunk_id not in kept:
            cosine = hit.score if hit.similarity is None else hit.similarity
            score = hit.score * LOW_TEXT_WEIGHT if hit.score >= 0 else hit.score / LOW_TEXT_WEIGHT
            hit = dataclasses.replace(hit, score=score, similarity=cosine)  # type: ignore[type-var]
        out.append(hit)
    order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
    return [out[i] for i in order[:k]]
