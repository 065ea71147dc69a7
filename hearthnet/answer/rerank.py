"""Reordering the merged chunks with a cross-encoder (``rerank.text``) when one is reachable.

A cross-encoder reads the question and a passage together, so it orders passages
better than the similarity of two separately computed vectors.  The composer
asks it after merge and threshold, before packing the prompt: the best
``rerank_candidates`` chunks are sorted by its scores (ties keep the merged
order), the rest follow unchanged.  Its scores are not cosines, so the
similarity threshold and the skip rule stay on the retrieval's scores.  Any
failure keeps the merged order: the answer never depends on the reranker.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.answer.hits import Hit
from hearthnet.bus.api import BusAPI
from hearthnet.config import AnswerConfig
from hearthnet.contracts.fusion import Ranked
from hearthnet.contracts.rerank import CAPABILITY, MAX_TEXT_CHARS
from hearthnet.errors import BusError

__all__ = ["CAPABILITY", "MAX_TEXT_CHARS", "Reranking", "choose_reranker", "rerank"]


@dataclass(frozen=True)
class Reranking:
    """What the rerank step did: ``used``, ``failed`` (merged order kept) or ``none`` (not asked)."""

    status: str
    model: str | None = None
    ms: float | None = None
    code: str | None = None
    """The failure's wire code."""
    scores: dict[str, float] = field(default_factory=dict)
    """Chunk id -> the reranker's score, for the chunks it ordered."""

    def add_to(self, meta: dict[str, Any], debug: dict[str, Any]) -> None:
        """Write ``meta.rerank`` (and ``rerank_error``), and the debug details with each chunk's score."""
        meta["rerank"] = self.status
        if self.code is not None:
            meta["rerank_error"] = self.code
        if self.status == "none":
            return
        debug["rerank"] = {"model": self.model, "ms": self.ms, "chunks": len(self.scores)}
        if self.status == "used":
            for chunk in debug.get("chunks", []):
                score = self.scores.get(chunk["chunk_id"])
                chunk["rerank"] = None if score is None else round(score, 6)


def choose_reranker(bus: BusAPI, config: AnswerConfig) -> str | None:
    """The ``rerank.text`` model to ask, or ``None`` (turned off, none reachable, the configured one not).

    Without ``rerank_model``: a model this node serves first, then the first by name.
    """
    if not config.rerank:
        return None
    local: dict[str, bool] = {}
    for p in bus.offers(CAPABILITY, (1, 0)):
        model = p.descriptor.params.get("model")
        if isinstance(model, str) and model:
            local[model] = local.get(model, False) or p.is_local
    if config.rerank_model is not None:
        return config.rerank_model if config.rerank_model in local else None
    return min(local, key=lambda m: (not local[m], m), default=None)


def _scores(output: Any, count: int) -> list[float] | None:
    """``output.scores`` if it is ``count`` finite numbers, else ``None`` (a provider off the contract)."""
    scores = output.get("scores") if isinstance(output, dict) else None
    if not isinstance(scores, list) or len(scores) != count:
        return None
    if not all(isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) for s in scores):
        return None
    return [float(s) for s in scores]


async def rerank(
    bus: BusAPI,
    model: str | None,
    question: str,
    ranked: list[Ranked[Hit]],
    *,
    config: AnswerConfig,
    deadline: float,
) -> tuple[list[Ranked[Hit]], Reranking]:
    """``ranked`` reordered by ``model``'s scores of its first ``rerank_candidates``, and what happened.

    Fewer than two chunks, or no model: unchanged, ``none``.  A failed call or a
    malformed answer: unchanged, ``failed`` with the error's code.
    """
    if model is None or len(ranked) < 2:
        return ranked, Reranking("none")
    head, tail = ranked[: config.rerank_candidates], ranked[config.rerank_candidates :]
    timeout = max(0.001, min(config.rerank_timeout_seconds, deadline - anyio.current_time()))
    started = time.perf_counter()
    try:
        result = await bus.call(
            CAPABILITY,
            (1, 0),
            params={"model": model},
            # a chunk over the contract's limit is sent cut: its head decides its relevance
            input={"query": question, "texts": [r.hit.text[:MAX_TEXT_CHARS] for r in head]},
            timeout=timeout,
        )
    except BusError as exc:
        ms = round((time.perf_counter() - started) * 1000, 1)
        return ranked, Reranking("failed", model, ms, exc.code)
    ms = round((time.perf_counter() - started) * 1000, 1)
    scores = _scores(result.output, len(head))
    if scores is None:
        return ranked, Reranking("failed", model, ms, "internal_error")
    order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep the merged order
    by_id = {head[i].hit.chunk_id: scores[i] for i in order}
    return [head[i] for i in order] + tail, Reranking("used", model, ms, None, by_id)
