"""Citations in a generated answer: found, checked against the context, turned into sources.

A citation is ``[file#chunk_id]``; one bracket may hold several, separated by
``,`` or ``;``.  A cited id that was not in the prompt's context (made up, or
mistyped) is removed from the text and counted; a bracket left with no valid
citation disappears.  Brackets that do not look like citations (``[1]``,
``[see #3]``: ids are at least 6 characters) are left alone.  Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearthnet.answer.hits import Hit

__all__ = ["Checked", "check_citations", "source_of", "sources"]

_ID = r"[A-Za-z0-9][A-Za-z0-9_.:\-]{5,127}"
_ONE = rf"[^\[\]#\n;,]{{0,300}}#{_ID}"
_BRACKET = re.compile(rf"[ \t]?\[\s*({_ONE}(?:\s*[;,]\s*{_ONE})*)\s*\]")
_PAIR = re.compile(rf"([^\[\]#\n;,]{{0,300}})#({_ID})")


@dataclass(frozen=True)
class Checked:
    """The answer with invalid citations removed, the valid cited ids in order, and the removed count."""

    text: str
    cited: list[str]
    removed: int


def check_citations(answer: str, context_ids: Mapping[str, Hit]) -> Checked:
    """Keep citations of chunks in ``context_ids`` (by id, case-insensitively); drop the rest."""
    by_lower = {cid.lower(): cid for cid in context_ids}
    cited: list[str] = []
    removed = 0

    def rewrite(m: re.Match[str]) -> str:
        nonlocal removed
        kept: list[str] = []
        for pair in _PAIR.finditer(m.group(1)):
            cid = by_lower.get(pair.group(2).lower())
            if cid is None:
                removed += 1
                continue
            if cid not in cited:
                cited.append(cid)
            kept.append(f"{context_ids[cid].file}#{cid}")
        if not kept:
            return ""
        lead = m.group(0)[0] if m.group(0)[0] in " \t" else ""
        return f"{lead}[{'; '.join(kept)}]"

    text = _BRACKET.sub(rewrite, answer)
    return Checked(text, cited, removed)


def source_of(hit: Hit, *, cited: bool) -> dict[str, Any]:
    """One entry of the answer's ``sources`` (with its passage, which a front door shows)."""
    return {
        "chunk_id": hit.chunk_id,
        "text": hit.text,
        "title": hit.title,
        "file": hit.file,
        "page": hit.page,
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
