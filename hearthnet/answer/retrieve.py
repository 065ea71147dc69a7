"""Fan-out retrieval: one ``rag.query`` per corpus, all at once, within one deadline.

Which corpora exist comes from the bus registry: every ``rag.query``
registration (``BusAPI.offers``: a node has one per corpus) advertises
``{corpus, embedding_model, k_max}`` (the ``personal`` corpus only
on this node).  Each corpus gets a status: ``ok`` (answered), ``timeout`` (not
answered by the deadline: left out), ``unavailable`` (no provider, or its
store or embedder failed: left out, with the error code).  A failure is never
raised: the composer answers with what came back.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.answer.hits import Hit
from hearthnet.bus.api import BusAPI
from hearthnet.contracts.rag import MAX_K, RagClient
from hearthnet.errors import BusError

__all__ = [
    "CorpusResult",
    "Reachable",
    "Target",
    "default_corpora",
    "overall_status",
    "reachable_corpora",
    "retrieve",
    "unreachable_corpora",
]


@dataclass(frozen=True)
class Target:
    corpus: str
    k: int


@dataclass
class CorpusResult:
    corpus: str
    status: str = "pending"
    hits: list[Hit] = field(default_factory=list)
    ms: float = 0.0
    node: str = ""
    code: str = ""
    replica_of: str = ""
    """The corpus's host when a replica answered (``behind``: documents it had not applied yet)."""
    behind: int = 0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "hits": len(self.hits), "ms": round(self.ms, 1)}
        if self.node:
            out["node"] = self.node
        if self.replica_of:  # "from a copy 2 documents behind"
            out["replica_of"], out["behind"] = self.replica_of, self.behind
        if self.code:
            out["code"] = self.code
        return out


@dataclass
class Reachable:
    """A corpus as the registry shows it: the largest ``k`` a provider takes, its model, whether held here."""

    k: int
    embedding_model: str
    local: bool


def reachable_corpora(bus: BusAPI) -> dict[str, Reachable]:
    """Every corpus with a ``rag.query`` registration here or on a peer (``k`` at most 20)."""
    out: dict[str, Reachable] = {}
    for p in bus.offers("rag.query", (1, 0)):
        params = p.descriptor.params
        corpus, k_max, model = params.get("corpus"), params.get("k_max"), params.get("embedding_model")
        if not isinstance(corpus, str) or not corpus:
            continue
        k = k_max if type(k_max) is int and 1 <= k_max <= MAX_K else MAX_K
        seen = out.setdefault(corpus, Reachable(k, model if isinstance(model, str) else "", p.is_local))
        seen.k, seen.local = max(seen.k, k), seen.local or p.is_local
    return out


def default_corpora(reachable: Mapping[str, Reachable], limit: int) -> tuple[list[str], int]:
    """The corpora asked when the caller names none: this node's first, then by name, at most ``limit``.

    Members advertise corpora, so their number is theirs to choose: one ask
    never fans out to more than ``limit``.  Returns the names and how many were left out.
    """
    names = sorted(reachable, key=lambda c: (not reachable[c].local, c))
    return sorted(names[:limit]), max(0, len(names) - limit)


async def unreachable_corpora(bus: BusAPI, asked: Sequence[str], *, timeout: float) -> dict[str, Any]:
    """Corpora the community knows of (``rag.known_corpora``, from its event log) that were not
    asked because none of their hosts serves them now: ``{name: {hosts: [{node, node_name,
    last_seen}]}}``.  Empty if this node cannot tell (a bus error is no reason to fail an ask)."""
    try:
        known = await RagClient(bus).known_corpora(provider=bus.node_id, timeout=timeout)
    except BusError:
        return {}
    out: dict[str, Any] = {}
    for entry in known:
        name = entry.get("name")
        hosts = [h for h in entry.get("hosts") or [] if isinstance(h, dict) and h.get("hosting")]
        if not isinstance(name, str) or name in asked or not hosts or any(h.get("serving") for h in hosts):
            continue
        out[name] = {
            "hosts": [
                {
                    "node": h.get("node"),
                    "node_name": h.get("node_name") or "",
                    "last_seen": h.get("last_seen"),
                }
                for h in hosts
            ]
        }
    return out


def overall_status(results: Mapping[str, CorpusResult]) -> str:
    """``used`` (all answered), ``partial`` (some), ``timeout`` or ``unavailable`` (none)."""
    statuses = [r.status for r in results.values()]
    answered = statuses.count("ok")
    if statuses and answered == len(statuses):
        return "used"
    if answered:
        return "partial"
    return "timeout" if "timeout" in statuses else "unavailable"


def _hits(raw: Any, corpus: str, node: str, model: str) -> list[Hit]:
    """A ``rag.query`` answer's chunks as hits; malformed entries are skipped, never trusted."""
    chunks = raw.get("chunks") if isinstance(raw, dict) else None
    out: list[Hit] = []
    for i, c in enumerate(chunks if isinstance(chunks, list) else []):
        if not isinstance(c, dict):
            continue
        metadata = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        chunk_id, text, score = metadata.get("chunk_id"), c.get("text"), c.get("score")
        if not isinstance(chunk_id, str) or not chunk_id or not isinstance(text, str):
            continue
        if isinstance(score, bool) or not isinstance(score, int | float) or score != score:
            continue
        similarity = c.get("similarity")  # the cosine beside a hybrid score (older hosts: absent)
        if (
            isinstance(similarity, bool)
            or not isinstance(similarity, int | float)
            or similarity != similarity
        ):
            similarity = None
        rank = c.get("rank")
        out.append(
            Hit(
                chunk_id=chunk_id[:128],
                text=text,
                score=float(score),
                corpus=corpus,
                node=node,
                embedding_model=model,
                rank=rank if type(rank) is int else i + 1,
                metadata=metadata,
                similarity=None if similarity is None else float(similarity),
            )
        )
    return out


async def retrieve(
    bus: BusAPI,
    query: str,
    targets: Sequence[Target],
    *,
    timeout: float,
    models: Mapping[str, str],
    on_change: Callable[[dict[str, CorpusResult]], Awaitable[None]] | None = None,
) -> dict[str, CorpusResult]:
    """Query every target at once; whatever has not answered after ``timeout`` seconds is a ``timeout``.

    ``models`` gives each corpus's advertised embedding model, used when an
    answer's meta does not name one.  ``on_change`` is awaited after each corpus
    settles (for progress frames).
    """
    results = {t.corpus: CorpusResult(t.corpus) for t in targets}
    started = time.perf_counter()
    rag = RagClient(bus)

    async def one(target: Target) -> None:
        result = results[target.corpus]
        try:
            answer = await rag.query(target.corpus, query, k=target.k, timeout=timeout)
        except BusError as exc:
            result.status = "timeout" if exc.code == "timeout" else "unavailable"
            result.code = exc.code
        else:
            model = answer.meta.get("embedding_model")
            if not isinstance(model, str) or not model:
                model = models.get(target.corpus, "")
            result.node = answer.provider
            replica_of, behind = answer.meta.get("replica_of"), answer.meta.get("behind")
            if isinstance(replica_of, str) and type(behind) is int:
                result.replica_of, result.behind = replica_of[:128], max(0, behind)
            result.hits = _hits(answer.output, target.corpus, answer.provider, model)
            result.status = "ok"
        result.ms = (time.perf_counter() - started) * 1000
        if on_change is not None:
            await on_change(results)

    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:
            for target in targets:
                tg.start_soon(one, target)
    for result in results.values():
        if result.status == "pending":
            result.status, result.code = "timeout", "timeout"
            result.ms = (time.perf_counter() - started) * 1000
    return results
