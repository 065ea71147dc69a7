"""One search over several corpora (and archives) at once: each asked with ``rag.query`` where it is
served, the answers merged into one ranking by :func:`hearthnet.contracts.fusion.fuse` — by score
when they share an embedding model, by reciprocal rank fusion across models.

Each hit names its corpus and the node that answered; a corpus that fails (not found, its host
offline, its embedder gone) is named with its error and does not fail the others.  Written
against :class:`~hearthnet.contracts.base.Caller`, so the CLI and any client share it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.contracts.base import Caller
from hearthnet.contracts.fusion import HitKeys, Ranked, fuse
from hearthnet.contracts.rag import MAX_K, RagClient, validate_corpus_name
from hearthnet.errors import BadRequest, BusError, NotFound, Partition
from hearthnet.frontends.client.corpora import MAX_CORPORA, explain_unreachable

__all__ = ["CorpusAnswer", "CorpusHit", "MultiSearch", "search_corpora"]

AT_ONCE = 8
"""Corpora asked at the same time by one search."""


@dataclass(frozen=True)
class CorpusHit:
    """One chunk of one corpus's answer."""

    corpus: str
    node: str
    """The node that answered for the corpus."""
    embedding_model: str
    rank: int
    """1-based rank in its corpus's answer."""
    score: float
    text: str | None
    metadata: Mapping[str, Any]
    source: int
    """Position of its corpus in the request: breaks ties, so the order never depends on arrival."""

    @property
    def chunk_id(self) -> str:
        return str(self.metadata.get("chunk_id") or "")


@dataclass(frozen=True)
class CorpusAnswer:
    """How one corpus of the search fared."""

    corpus: str
    status: str
    """``ok`` or ``failed``."""
    node: str | None = None
    embedding_model: str | None = None
    hits: int = 0
    mode: str | None = None
    """How the corpus ranked (``rag.query``'s ``meta.mode``): dense, keyword or hybrid."""
    error: BusError | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "corpus": self.corpus,
            "status": self.status,
            "node": self.node,
            "embedding_model": self.embedding_model,
            "hits": self.hits,
        }
        if self.mode is not None:
            doc["mode"] = self.mode
        if self.error is not None:
            doc["error"] = self.error.to_wire()
        if self.warnings:
            doc["warnings"] = self.warnings
        return doc


@dataclass(frozen=True)
class MultiSearch:
    results: list[Ranked[CorpusHit]]
    merge: str
    """``score`` (one embedding model) or ``rrf`` (several)."""
    corpora: list[CorpusAnswer]

    @property
    def answered(self) -> bool:
        """Whether at least one corpus answered (with hits or none)."""
        return any(c.status == "ok" for c in self.corpora)


HIT_KEYS: HitKeys[CorpusHit] = HitKeys(
    model=lambda h: h.embedding_model,
    score=lambda h: h.score,
    identity=lambda h: (h.node, h.corpus, h.chunk_id),
    text=lambda h: h.text,
    order=lambda h: (-h.score, h.source, h.rank, h.chunk_id),
    tie=lambda h: (h.source, h.rank, h.chunk_id),
)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _hits(raw: Any, corpus: str, node: str, model: str, source: int) -> list[CorpusHit]:
    """The chunks of one ``rag.query`` answer; an entry a peer malformed is dropped, never raised."""
    out: list[CorpusHit] = []
    for i, c in enumerate(raw if isinstance(raw, list) else [], start=1):
        if not isinstance(c, Mapping):
            continue
        score, text, metadata = c.get("score"), c.get("text"), c.get("metadata")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            continue
        if not (text is None or isinstance(text, str)) or not isinstance(metadata, Mapping):
            continue
        rank = c.get("rank")
        out.append(
            CorpusHit(
                corpus=corpus,
                node=node,
                embedding_model=model,
                rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else i,
                score=float(score),
                text=text,
                metadata=dict(metadata),
                source=source,
            )
        )
    return out


def checked_corpora(names: Sequence[str]) -> list[str]:
    """The corpus names of a search, each checked, each once, in the order given."""
    out: list[str] = []
    for name in names:
        corpus = validate_corpus_name(name)
        if corpus not in out:
            out.append(corpus)
    if not out:
        raise BadRequest("name at least one corpus to search")
    if len(out) > MAX_CORPORA:
        raise BadRequest(f"{len(out)} corpora named; one search covers at most {MAX_CORPORA}")
    return out


async def search_corpora(
    caller: Caller,
    corpora: Sequence[str],
    query: str,
    *,
    k: int,
    filter: Mapping[str, Any] | None = None,
    mode: str | None = None,
    include_text: bool = True,
    timeout: float | None = None,
) -> MultiSearch:
    """``query`` in every corpus of ``corpora`` (``k`` each, at once, each ranked by ``mode``, its
    host's default if ``None``), merged and cut to ``k``."""
    names = checked_corpora(corpora)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise BadRequest(f"k must be between 1 and {MAX_K}")
    rag = RagClient(caller)
    answers: list[CorpusAnswer | None] = [None] * len(names)
    found: list[list[CorpusHit]] = [[] for _ in names]
    limit = anyio.CapacityLimiter(AT_ONCE)

    async def one(source: int, corpus: str) -> None:
        async with limit:
            try:
                result = await rag.query(
                    corpus, query, k=k, filter=filter, mode=mode, include_text=include_text, timeout=timeout
                )
            except BusError as exc:
                if isinstance(exc, NotFound | Partition):
                    with contextlib.suppress(BusError):  # the catalog cannot say more: keep the error
                        exc = await explain_unreachable(caller, corpus, exc)
                answers[source] = CorpusAnswer(corpus, "failed", error=exc)
                return
        node = str(result.provider or "")
        model = str(result.meta.get("embedding_model") or "")
        hits = _hits(result.output.get("chunks"), corpus, node, model, source)
        found[source] = hits
        answers[source] = CorpusAnswer(
            corpus,
            "ok",
            node=node,
            embedding_model=model,
            hits=len(hits),
            mode=str(result.meta["mode"]) if isinstance(result.meta.get("mode"), str) else None,
            warnings=[str(w) for w in _list(result.meta.get("warnings"))],
        )

    async with anyio.create_task_group() as tg:
        for source, corpus in enumerate(names):
            tg.start_soon(one, source, corpus)
    done = [a for a in answers if a is not None]
    errors = [a.error for a in done if a.error is not None]
    if (
        errors
        and len(errors) == len(done)
        and all(isinstance(e, BadRequest) for e in errors)
        and len({e.message for e in errors}) == 1
    ):
        raise errors[0]  # the query or the filter itself is wrong: every corpus said the same
    ranked, how = fuse([h for hits in found for h in hits], HIT_KEYS)
    return MultiSearch(results=ranked[:k], merge=how, corpora=done)
