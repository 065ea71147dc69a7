"""Citations in an answer: checked against the context as the text streams, turned into sources.

Markers are :mod:`hearthnet.contracts.markers`' (any closed bracket holding a ``#``, whatever
its shape).  A ref whose id is not a chunk of the prompt's context (made up, mistyped, or
copied from a document that says "see [secret-plans.pdf#p4]") is removed from the text and
counted; a marker left with no valid ref disappears, with the space before it.  Kept refs are
rewritten with the context's file name.  :class:`CitationCheck` does this incrementally, so
the text a front door streams is the text the answer ends with: each span is held back until
it closes (at most ``MAX_MARKER_CHARS``), then emitted or dropped.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearthnet.answer.hits import Hit
from hearthnet.contracts.markers import MAX_MARKER_CHARS, Brackets, Span, marker_ids

__all__ = ["Checked", "CitationCheck", "check_citations", "neutralised", "source_of", "sources"]


@dataclass(frozen=True)
class Checked:
    """The answer with invalid citations removed, the valid cited ids in order, and the removed count."""

    text: str
    cited: list[str]
    removed: int


class CitationCheck:
    """Feed an answer's deltas; each call returns the checked text that may be shown now."""

    def __init__(self, context_ids: Mapping[str, Hit], *, limit: int = MAX_MARKER_CHARS) -> None:
        self._context = context_ids
        self._by_lower = {cid.lower(): cid for cid in context_ids}
        self._brackets = Brackets(limit)
        self._shown: list[str] = []
        self.cited: list[str] = []
        self.removed = 0

    def feed(self, delta: str) -> str:
        return self._text(self._brackets.feed(delta))

    def close(self) -> str:
        """What was held back at the end (an unclosed marker is dropped)."""
        return self._text(self._brackets.close())

    def checked(self) -> Checked:
        """Everything returned so far, as one :class:`Checked` (call after :meth:`close`)."""
        return Checked("".join(self._shown), list(self.cited), self.removed)

    def _text(self, pieces: Sequence[str | Span]) -> str:
        text = "".join(p if isinstance(p, str) else self._span(p) for p in pieces)
        if text:
            self._shown.append(text)
        return text

    def _span(self, span: Span) -> str:
        if not span.is_marker:
            return span.text  # a "[" still open at the end: nothing can close it any more
        kept: list[str] = []
        for ref in marker_ids(span.inner):
            cid = self._by_lower.get(ref.lower()) if span.closed else None
            if cid is None:
                self.removed += 1
                continue
            if cid not in self.cited:
                self.cited.append(cid)
            if cid not in kept:
                kept.append(cid)
        if not kept:
            return ""
        return f"{span.lead}[{'; '.join(f'{self._context[c].file}#{c}' for c in kept)}]"


def check_citations(answer: str, context_ids: Mapping[str, Hit]) -> Checked:
    """Keep citations of chunks in ``context_ids`` (by id, case-insensitively); drop the rest."""
    check = CitationCheck(context_ids)
    check.feed(answer)
    check.close()
    return check.checked()


def neutralised(quote: str) -> str:
    """A document's text quoted in an answer: its brackets become parentheses, so nothing it says
    can pose as a citation (``[secret-plans.pdf#p4]`` is quoted as ``(secret-plans.pdf#p4)``)."""
    return quote.replace("[", "(").replace("]", ")")


def source_of(hit: Hit, *, cited: bool) -> dict[str, Any]:
    """One entry of the answer's ``sources`` (with its passage, which a front door shows)."""
    return {
        "chunk_id": hit.chunk_id,
        "text": hit.text,
        "title": hit.title,
        "file": hit.file,
        "page": hit.page,
        "place": hit.place,
        "anchor": hit.anchor,
        "doc_cid": hit.doc_cid,
        "corpus": hit.corpus,
        "node": hit.node,
        "score": round(hit.score, 6),
        "cited": cited,
    }


def sources(context: Sequence[Hit], cited: Sequence[str]) -> list[dict[str, Any]]:
    """The cited chunks in citation order, then the context's uncited ones in rank order."""
    by_id = {h.chunk_id: h for h in context}
    first = [source_of(by_id[c], cited=True) for c in cited if c in by_id]
    cited_set = set(cited)
    return first + [source_of(h, cited=False) for h in context if h.chunk_id not in cited_set]
