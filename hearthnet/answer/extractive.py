"""The answer when no language model is reachable: the documents' own sentences, cited.

The top chunks are split into sentences; the question and the sentences are
embedded through ``embed.text`` (with each chunk's own corpus model, so the
vectors are comparable) and the sentences most similar to the question are
quoted, each with its ``[file#chunk_id]``: only those close to the best one (a sentence far
below it answers something else).  If the embedder cannot be reached
the sentences are ranked by the question's words they share instead (and the
meta says so): an answer from the documents is still better than none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hearthnet.answer.hits import Hit
from hearthnet.bus.api import BusAPI
from hearthnet.contracts.embed import MAX_TEXTS, Embedder
from hearthnet.contracts.rag import LOW_TEXT
from hearthnet.errors import BusError

__all__ = ["Sentence", "close_to_the_best", "extract", "leading_clauses", "rank_lexically", "split_sentences"]

MIN_SENTENCE_CHARS = 20
MAX_SENTENCE_CHARS = 400
MAX_SENTENCES = 200
"""Most sentences embedded for one answer (``embed.text`` takes 256 texts a call)."""
_END = re.compile(r"(?<=[.!?\u2026\u3002\uff01\uff1f])[\"'\u201d\u2019)\]]*\s+")
_WORD = re.compile(r"\w{3,}")
_CLAUSE = re.compile(r"[,;:](?=\s)")
LONG_SENTENCE_CHARS = 160
"""A sentence longer than this is also scored by its leading clauses (:func:`leading_clauses`)."""
MIN_CLAUSE_CHARS = 60
MAX_CLAUSES = 3
"""Leading clauses scored per long sentence at most (the longest ones)."""


@dataclass(frozen=True)
class Sentence:
    text: str
    hit: Hit
    position: int
    """Index among all candidate sentences (chunk rank order, then order in the chunk)."""


def split_sentences(text: str) -> list[str]:
    """The sentences of a chunk worth quoting: whitespace collapsed, 20-400 characters."""
    flat = " ".join(text.split())
    out = []
    for part in _END.split(flat):
        part = part.strip()
        if len(part) < MIN_SENTENCE_CHARS:
            continue
        if len(part) > MAX_SENTENCE_CHARS:
            cut = part.rfind(" ", 0, MAX_SENTENCE_CHARS)
            part = part[: cut if cut > MIN_SENTENCE_CHARS else MAX_SENTENCE_CHARS] + " …"
        out.append(part)
    return out


def candidates(hits: Sequence[Hit]) -> list[Sentence]:
    """Each distinct sentence of ``hits`` once (overlapping chunks repeat their edges); those of
    chunks whose page carries almost no text (a title page: ``low_text``) only if no other has any."""
    content = [h for h in hits if h.metadata.get(LOW_TEXT) is not True]
    low = [h for h in hits if h.metadata.get(LOW_TEXT) is True]
    return _sentences(content) or _sentences(low)


def _sentences(hits: Sequence[Hit]) -> list[Sentence]:
    seen: set[str] = set()
    out: list[Sentence] = []
    for hit in hits:
        for text in split_sentences(hit.text):
            key = text.casefold()
            if key in seen:
                continue
            seen.add(key)
            out.append(Sentence(text, hit, len(out)))
            if len(out) >= MAX_SENTENCES:
                return out
    return out


def rank_lexically(question: str, sentences: Sequence[Sentence]) -> list[tuple[Sentence, float]]:
    """Sentences by the share of the question's words (3+ letters) they contain."""
    wanted = {w.casefold() for w in _WORD.findall(question)}
    scored = []
    for s in sentences:
        words = {w.casefold() for w in _WORD.findall(s.text)}
        common = len(wanted & words)
        scored.append((s, common / math.sqrt(len(words) or 1) if wanted else 0.0))
    return sorted(scored, key=lambda p: (-p[1], p[0].position))


async def _rank_by_embedding(
    bus: BusAPI, question: str, sentences: Sequence[Sentence], timeout: float
) -> list[tuple[Sentence, float]]:
    by_model: dict[str, list[Sentence]] = {}
    for s in sentences:
        by_model.setdefault(s.hit.embedding_model, []).append(s)
    scored: list[tuple[Sentence, float]] = []
    for model, group in by_model.items():
        texts = [(i, s.text) for i, s in enumerate(group)]
        room = MAX_TEXTS - 1 - len(texts)  # one call: the question, the sentences, clauses in rank order
        for i, s in enumerate(group):
            clauses = leading_clauses(s.text)[: max(0, room)]
            texts += [(i, c) for c in clauses]
            room -= len(clauses)
        answer = await Embedder(bus, model, timeout).embed([question, *(t for _, t in texts)])
        vectors = answer.vectors
        sims = vectors[1:] @ vectors[0]
        best = [-math.inf] * len(group)
        for (i, _), sim in zip(texts, sims, strict=True):
            best[i] = max(best[i], float(sim))
        scored.extend(zip(group, best, strict=True))
    return sorted(scored, key=lambda p: (-p[1], p[0].position))


def leading_clauses(text: str) -> list[str]:
    """The opening of a long sentence, cut after each clause (at ``,`` ``;`` ``:``) from
    ``MIN_CLAUSE_CHARS`` to ``LONG_SENTENCE_CHARS`` characters: a long sentence's vector averages
    all its clauses, so the one that answers ("When first I took up my abode in the woods, ...,
    was on Independence Day, ...") is scored on its own too; the whole sentence is quoted."""
    if len(text) <= LONG_SENTENCE_CHARS:
        return []
    out: list[str] = []
    for cut in _CLAUSE.finditer(text):
        head = text[: cut.start() + 1]
        if len(head) > LONG_SENTENCE_CHARS:
            break
        if len(head) >= MIN_CLAUSE_CHARS:
            out.append(head)
    return out[-MAX_CLAUSES:]


def close_to_the_best(
    ranked: Sequence[tuple[Sentence, float]], *, sentences: int, margin: float, floor: float
) -> list[tuple[Sentence, float]]:
    """The first ``sentences`` of ``ranked`` (best first) whose score is within ``margin`` of the
    best one's, relatively (``score >= best * (1 - margin)``), and at least ``floor``; the best
    one always.  A sentence far below the best answers something else: quoting it misleads."""
    if not ranked or sentences <= 0:
        return []
    best = ranked[0][1]
    cut = max(floor, best * (1 - margin))
    return [ranked[0], *(p for p in ranked[1:sentences] if p[1] >= cut)]


async def extract(
    bus: BusAPI,
    question: str,
    hits: Sequence[Hit],
    *,
    sentences: int,
    timeout: float,
    margin: float = 1.0,
    floor: float = 0.0,
) -> tuple[list[tuple[Sentence, float]], str]:
    """At most ``sentences`` best sentences of ``hits`` with their scores (those close to the best,
    see :func:`close_to_the_best`), and how they were ranked.  ``floor`` is a cosine: it applies to
    the embedding ranking only (shared-word scores have another scale)."""
    pool = candidates(hits)
    if not pool or sentences <= 0:
        return [], "embedding"
    try:
        ranked, how = await _rank_by_embedding(bus, question, pool, timeout), "embedding"
    except BusError:
        ranked, how = rank_lexically(question, pool), "lexical"
        floor = 0.0
    return close_to_the_best(ranked, sentences=sentences, margin=margin, floor=floor), how
