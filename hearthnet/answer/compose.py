"""One question answered, in named steps (:meth:`Composer.ask`): plan (and the cache), retrieve,
decide (abstain or not), rank (merge, rerank), select (:mod:`.selection`), say (generate through
:mod:`.generate`, abstain or extract, the citations checked), store (session, cache).

The composer reaches ``rag.query``, ``embed.text`` and ``llm.chat`` only
through the bus.  Progress goes to ``send`` as frames: ``{stage: "retrieve",
corpora}`` while corpora answer, then ``{delta}`` text frames, so a front door
can show the answer as it comes.  Citations are checked as the text streams
(:class:`~hearthnet.answer.citations.CitationCheck`): the deltas joined are the
output's ``answer``, and a made-up citation is never sent.  When nothing retrieved
is close enough to the question, the answer abstains (:mod:`hearthnet.answer.abstain`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from hearthnet.answer.abstain import abstains, abstention, best_cosine, nearest_sources
from hearthnet.answer.archives import retrieve_archives
from hearthnet.answer.cache import AnswerCache, CacheKey
from hearthnet.answer.citations import Checked, CitationCheck, neutralised, sources
from hearthnet.answer.extractive import extract
from hearthnet.answer.frames import Say, Send, announcing, checking, rounded, where
from hearthnet.answer.generate import NoToken, generate
from hearthnet.answer.hits import Hit
from hearthnet.answer.merge import merge
from hearthnet.answer.prompt import Turn
from hearthnet.answer.rerank import Reranking, choose_reranker, rerank
from hearthnet.answer.retrieve import (
    CorpusResult,
    Reachable,
    Target,
    default_corpora,
    overall_status,
    reachable_corpora,
    retrieve,
    unreachable_corpora,
)
from hearthnet.answer.selection import Selection, select
from hearthnet.bus.api import BusAPI
from hearthnet.config import AnswerConfig
from hearthnet.contracts.answer import MAX_CORPORA
from hearthnet.contracts.fusion import Ranked
from hearthnet.contracts.rag import MAX_K
from hearthnet.errors import BusError

__all__ = ["Ask", "Composer", "ModelChoice", "choose_model", "should_skip"]

log = structlog.get_logger("hearthnet.answer")

NO_PASSAGE = "(no passage of the documents matches the question)"
NO_SEARCH = "(none of the corpora could be searched)"
NOT_SEARCHED = "(the documents were not searched, as asked, and no language model is reachable)"
EXTRACTIVE_AS_ASKED = (
    "Quoted from the documents, as asked (no language model); these passages match the question:"
)


@dataclass(frozen=True)
class Ask:
    """A validated ``answer.ask`` input."""

    question: str
    corpora: tuple[str, ...] | None = None
    session: str | None = None
    no_rag: bool = False
    debug: bool = True
    cache: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    archives: tuple[Mapping[str, Any], ...] = ()
    """Archives to search besides the corpora (the seeds' ``rag_config.archives`` entries)."""
    history: tuple[Turn, ...] | None = None
    """Earlier turns given by the caller (instead of a session's)."""
    model: str | None = None
    """The ``llm.chat`` model asked for (else ``[answer] model``, else the largest window)."""
    extractive: bool = False
    """Asked to quote the documents, with no model (the web UI's "extractive only")."""

    @property
    def cacheable(self) -> bool:
        """Whether this kind of answer is cached: archives change without telling this node, and
        given history is the caller's, so neither is.  (``cache: false`` skips the lookup only: the
        fresh answer is stored for the next asker.)"""
        return not self.archives and self.history is None


@dataclass(frozen=True)
class ModelChoice:
    model: str
    context_tokens: int | None
    """The smallest window among the model's providers (the bus may route to any of them)."""
    max_output_tokens: int | None


def _positive(value: object) -> int | None:
    return value if type(value) is int and value > 0 else None


def choose_model(bus: BusAPI, wanted: str | None) -> ModelChoice | None:
    """The ``llm.chat`` model to use: ``wanted`` if reachable, else the one with the largest window.

    ``None`` when no provider is reachable (or the configured model is not):
    the answer is then extractive.
    """
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for p in bus.offers("llm.chat", (1, 0)):
        model = p.descriptor.params.get("model")
        if isinstance(model, str) and model and (wanted is None or model == wanted):
            by_model.setdefault(model, []).append(p.descriptor.params)
    choices = []
    for model, offers in by_model.items():
        windows = [w for w in (_positive(o.get("context_tokens")) for o in offers) if w is not None]
        outputs = [w for w in (_positive(o.get("max_output_tokens")) for o in offers) if w is not None]
        choices.append(
            ModelChoice(model, min(windows) if windows else None, min(outputs) if outputs else None)
        )
    if not choices:
        return None
    return max(choices, key=lambda c: (c.context_tokens or 0, c.model))


def should_skip(question: str, top_score: float | None, *, threshold: float, short_chars: int) -> bool:
    """The seed's rule: a question under ``short_chars`` characters with no chunk above the threshold."""
    return len(question.strip()) < short_chars and (top_score is None or top_score <= threshold)


@dataclass(frozen=True)
class _Plan:
    """What one ask searches and with which model (and so the cache's key)."""

    names: list[str]
    left_out: int
    reachable: Mapping[str, Reachable]
    choice: ModelChoice | None
    max_tokens: int
    temperature: float
    reranker: str | None
    key: CacheKey


@dataclass
class _Found:
    """What retrieval found: per corpus, those away, the overall status and why it was skipped."""

    results: dict[str, CorpusResult] = field(default_factory=dict)
    offline: dict[str, Any] = field(default_factory=dict)
    rag: str = "unavailable"
    skipped: str | None = None
    hits: list[Hit] = field(default_factory=list)
    ms: float = 0.0


@dataclass(frozen=True)
class _Said:
    mode: str
    checked: Checked
    ttft_ms: float | None


def _nothing_found(found: _Found) -> str:
    """The line an extractive answer says when it has no sentence to quote, and why."""
    if found.skipped == "no_rag":
        return NOT_SEARCHED
    return NO_SEARCH if found.rag in ("unavailable", "timeout") else NO_PASSAGE


def _meta(plan: _Plan, found: _Found, merged_by: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "rag": found.rag,
        "corpora": {name: r.summary() for name, r in found.results.items()},
        "merge": merged_by,
        "corpora_left_out": plan.left_out,
        "model": plan.choice.model if plan.choice else None,
        "cache": "miss",
    }
    if found.skipped is not None:
        meta["skipped"] = found.skipped
    if found.offline:
        meta["corpora_unreachable"] = found.offline
    return meta


def _debug(selection: Selection, retrieve_ms: float, ttft_ms: float | None) -> dict[str, Any]:
    return {
        "chunks": [
            {
                "chunk_id": h.chunk_id,
                "corpus": h.corpus,
                "score": round(h.score, 6),
                "similarity": round(h.cosine, 6),
                "fused": round(fused, 6),
            }
            for h, fused in selection.ranked
        ],
        "tokens": selection.tokens,
        "retrieve_ms": round(retrieve_ms, 1),
        "ttft_ms": None if ttft_ms is None else round(ttft_ms, 1),
    }


def _output(
    ask: Ask, found: _Found, selection: Selection, said: _Said, abstain: bool, meta: dict[str, Any]
) -> dict[str, Any]:
    by_id = {h.chunk_id: h for h in selection.context}
    cited = said.checked.cited
    return {
        "answer": said.checked.text,
        "citations": [
            {"chunk_id": c, "file": by_id[c].file, "page": by_id[c].page, "corpus": by_id[c].corpus}
            for c in cited
        ],
        "sources": nearest_sources(found.hits) if abstain else sources(selection.context, cited),
        "mode": said.mode,
        "session": ask.session,
        "meta": meta,
    }


class Composer:
    def __init__(
        self,
        *,
        bus: BusAPI,
        config: AnswerConfig,
        cache: AnswerCache,
        history: Callable[[str], Awaitable[list[Turn]]],
        record: Callable[[str, str, str, list[str], str, list[dict[str, Any]]], Awaitable[None]],
        attached: Callable[[str, str], Awaitable[CorpusResult | None]] | None = None,
    ) -> None:
        self._attached = attached
        """``(session, question)`` -> the session's attached documents searched (``None``: none)."""
        self._bus = bus
        self._config = config
        self._cache = cache
        self._history = history
        self._record = record

    async def ask(self, ask: Ask, send: Send, *, deadline: float) -> dict[str, Any]:
        """Answer ``ask`` in named steps: plan and cache, retrieve, decide, rerank, select,
        generate (or abstain, or extract) with its citations checked, store."""
        started = time.perf_counter()
        plan = self._plan(ask)
        cached = self._cache.get(plan.key) if ask.cache and ask.cacheable else None
        if cached is not None:
            return await self._replay(ask, cached, send, started)
        found = await self._retrieve(ask, plan, send)
        turns = await self._turns(ask)
        abstain = self._decide(plan, found, turns)
        ranked, merged_by, reranking = await self._rank(ask, plan, found, abstain, deadline)
        # Retrieval that answered (even with nothing above the threshold) frames the answer in the
        # documents; skipped or failed retrieval leaves a plain conversation.
        selection = select(
            self._config,
            ask.question,
            [(r.hit, r.fused) for r in ranked],
            turns,
            plan.choice.context_tokens if plan.choice else None,
            plan.max_tokens,
            found.rag in ("used", "partial"),
        )
        meta = _meta(plan, found, merged_by)
        said = await self._say(ask, plan, found, selection, abstain, meta, send, deadline)
        debug = _debug(selection, found.ms, said.ttft_ms)
        reranking.add_to(meta, debug)
        output = _output(ask, found, selection, said, abstain, meta)
        await self._store(ask, plan, found, said, output, debug, reranking)
        total_ms = (time.perf_counter() - started) * 1000
        if ask.debug:
            meta["debug"] = {**debug, "total_ms": round(total_ms, 1)}
        log.info(
            "answer_composed",
            mode=said.mode,
            rag=found.rag,
            corpora=len(found.results),
            chunks=len(selection.context),
            cited=len(said.checked.cited),
            citations_removed=said.checked.removed,
            llm_error=meta.get("llm_error"),
            rerank=reranking.status,
            ms=round(total_ms, 1),
        )
        return output

    # steps --------------------------------------------------------------------------
    def _plan(self, ask: Ask) -> _Plan:
        """What the ask searches and with which model, reranker and limits: the cache's key."""
        cfg = self._config
        reachable = reachable_corpora(self._bus)
        left_out = 0
        if ask.no_rag:
            names: list[str] = []  # no corpus searched, so none left out either
        elif ask.corpora is None and not ask.archives:
            names, left_out = default_corpora(reachable, MAX_CORPORA)
        else:  # archives named alone search only themselves, as the seeds' rag_config does
            names = list(ask.corpora or ())
        choice = None if ask.extractive else choose_model(self._bus, ask.model or cfg.model)
        max_tokens = ask.max_tokens or cfg.max_tokens
        if choice is not None and choice.max_output_tokens is not None:
            max_tokens = min(max_tokens, choice.max_output_tokens)
        temperature = cfg.temperature if ask.temperature is None else ask.temperature
        reranker = None if ask.no_rag else choose_reranker(self._bus, cfg)
        key = CacheKey.of(
            ask.question,
            ask.session,
            names,
            ask.no_rag,
            choice.model if choice else None,
            max_tokens,
            temperature,
            reranker,
        )
        return _Plan(names, left_out, reachable, choice, max_tokens, temperature, reranker, key)

    async def _retrieve(self, ask: Ask, plan: _Plan, send: Send) -> _Found:
        """The corpora (and archives) searched, with those away named when every corpus was
        asked for, and the session's attached documents (with ``no_rag`` too: they are the chat's
        own, not a corpus); a short question that found nothing close skips the documents."""
        cfg = self._config
        started = time.perf_counter()
        found = _Found()
        attached: dict[str, CorpusResult] = {}
        async with anyio.create_task_group() as tg:
            if not ask.no_rag and ask.corpora is None and not ask.archives:  # "every corpus": name those away

                async def away() -> None:
                    found.offline.update(
                        await unreachable_corpora(
                            self._bus, plan.names, timeout=cfg.retrieval_timeout_seconds
                        )
                    )

                tg.start_soon(away)
            if ask.session and self._attached is not None:  # the session's own documents, even with no_rag
                tg.start_soon(self._search_attached, ask.session, ask.question, attached)
            if not ask.no_rag and (plan.names or ask.archives):
                found.results = await self._search(
                    ask.question, plan.names, plan.reachable, send, ask.archives
                )
        found.results.update(attached)
        if ask.no_rag and not found.results:
            found.rag, found.skipped = "skipped", "no_rag"
        else:
            found.rag = overall_status(found.results) if found.results else "unavailable"
        found.ms = (time.perf_counter() - started) * 1000
        found.hits = [h for r in found.results.values() for h in r.hits]
        top = max((h.cosine for h in found.hits), default=None)
        if found.rag in ("used", "partial") and should_skip(  # only what was searched can be skipped
            ask.question, top, threshold=cfg.similarity_threshold, short_chars=cfg.short_question_chars
        ):
            found.rag, found.hits, found.skipped = "skipped", [], "short_question"
        return found

    async def _rank(
        self, ask: Ask, plan: _Plan, found: _Found, abstain: bool, deadline: float
    ) -> tuple[list[Ranked[Hit]], str, Reranking]:
        """The hits close enough to the question in one ranking (and how it was merged), then
        reranked if a reranker is reachable; none when the answer abstains."""
        cfg = self._config
        ranked, merged_by = merge(
            [] if abstain else [h for h in found.hits if h.cosine >= cfg.similarity_threshold]
        )
        ranked, reranking = await rerank(
            self._bus, plan.reranker, ask.question, ranked, config=cfg, deadline=deadline
        )
        return ranked, merged_by, reranking

    async def _turns(self, ask: Ask) -> list[Turn]:
        """The earlier turns: given by the caller, else the session's."""
        if ask.history is not None:
            return list(ask.history)
        return await self._history(ask.session) if ask.session else []

    def _decide(self, plan: _Plan, found: _Found, turns: list[Turn]) -> bool:
        """Whether the answer abstains: nothing retrieved is close enough to the question.  A
        follow-up ("and where is it kept?") may lean on earlier turns: a model decides then."""
        no_model_to_ask = plan.choice is None or not turns
        return no_model_to_ask and abstains(found.rag, found.hits, self._config.abstain_threshold)

    async def _say(
        self,
        ask: Ask,
        plan: _Plan,
        found: _Found,
        selection: Selection,
        abstain: bool,
        meta: dict[str, Any],
        send: Send,
        deadline: float,
    ) -> _Said:
        """The answer said, its citations checked as it streams: abstained, generated, or (no
        model, or one that failed before its first token) extracted from the passages."""
        send = announcing(send, selection.context)
        check = CitationCheck({h.chunk_id: h for h in selection.context})
        say = checking(send, check)
        ttft_ms: float | None = None
        mode = ""
        if abstain:
            await send({"stage": "answer", "mode": "abstained"})
            failed = sum(1 for n in plan.names if n in found.results and found.results[n].status != "ok")
            await say(abstention(len(found.offline) + failed + plan.left_out))  # corpora only
            mode = "abstained"
            meta["abstain"] = {
                "best": rounded(best_cosine(found.hits)),
                "bar": self._config.abstain_threshold,
            }
        elif plan.choice is not None:
            llm_started = time.perf_counter()
            try:
                first, meta["usage"] = await generate(
                    self._bus,
                    plan.choice.model,
                    selection,
                    ask.question,
                    plan.max_tokens,
                    plan.temperature,
                    say,
                    max(0.001, min(self._config.llm_timeout_seconds, deadline - anyio.current_time())),
                )
                mode = "generated"
                ttft_ms = None if first is None else (first - llm_started) * 1000
            except NoToken as exc:  # nothing was streamed yet: the documents still answer
                meta["llm_error"] = exc.code
        if not mode:
            mode = "extractive"
            meta["extractive_ranking"] = await self._extract(
                ask.question,
                selection.context,
                send,
                say,
                _nothing_found(found),
                EXTRACTIVE_AS_ASKED if ask.extractive else None,
            )
        await say(None)  # what the check held back at the end
        checked = check.checked()
        meta["citations_removed"] = checked.removed
        meta["chunks"] = len(selection.context)
        return _Said(mode, checked, ttft_ms)

    async def _store(
        self,
        ask: Ask,
        plan: _Plan,
        found: _Found,
        said: _Said,
        output: dict[str, Any],
        debug: dict[str, Any],
        reranking: Reranking,
    ) -> None:
        """The turn recorded in the session; the answer cached when it is whole (retrieval
        answered or was skipped, the model did not fail, reranking did not fail)."""
        if ask.session:
            turn = (said.checked.text, said.checked.cited, said.mode, output["sources"])
            await self._record(ask.session, ask.question, *turn)
        meta = output["meta"]
        if (
            ask.cacheable
            and found.rag in ("used", "skipped")
            and "llm_error" not in meta
            and reranking.status != "failed"
        ):
            self._cache.put(plan.key, {**output, "meta": {**meta, "debug": debug}})

    async def _search(
        self,
        question: str,
        names: Sequence[str],
        reachable: Mapping[str, Reachable],
        send: Send,
        archives: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, CorpusResult]:
        """The corpora and the archives, searched at once under one deadline."""
        cfg = self._config
        targets = [Target(c, min(reachable[c].k if c in reachable else MAX_K, cfg.top_k_max)) for c in names]
        found: dict[str, CorpusResult] = {}
        shown: dict[str, str] = {c: "pending" for c in names}
        await send({"stage": "retrieve", "corpora": dict(shown)})

        async def progress(results: dict[str, CorpusResult]) -> None:
            shown.update({c: r.status for c, r in results.items()})
            await send({"stage": "retrieve", "corpora": dict(shown)})

        async def corpora() -> None:
            found.update(
                await retrieve(
                    self._bus,
                    question,
                    targets,
                    timeout=cfg.retrieval_timeout_seconds,
                    models={c: r.embedding_model for c, r in reachable.items()},
                    on_change=progress,
                )
            )

        refused: list[BusError] = []

        async def from_archives() -> None:
            try:
                answered = await retrieve_archives(
                    self._bus,
                    question,
                    archives,
                    k=min(MAX_K, cfg.top_k_max),
                    timeout=cfg.retrieval_timeout_seconds,
                )
            except BusError as exc:  # a malformed rag_config: fails the ask, after the corpora settle
                refused.append(exc)
                return
            found.update(answered)
            await progress(answered)

        async with anyio.create_task_group() as tg:
            if targets:
                tg.start_soon(corpora)
            if archives:
                tg.start_soon(from_archives)
        if refused:
            raise refused[0]
        return found

    async def _search_attached(self, session: str, question: str, into: dict[str, CorpusResult]) -> None:
        """The documents attached to ``session``, searched beside the corpora."""
        assert self._attached is not None
        found = await self._attached(session, question)
        if found is not None:
            into[found.corpus] = found

    async def _extract(
        self,
        question: str,
        context: Sequence[Hit],
        send: Send,
        say: Say,
        nothing: str = NO_PASSAGE,
        header: str | None = None,
    ) -> str:
        """The extractive answer, said line by line (its quotes' brackets neutralised: a document's
        text never poses as a citation); returns how its sentences were ranked.  ``nothing`` is
        the line said when there is no sentence to quote (and why)."""
        cfg = self._config
        best, how = await extract(
            self._bus,
            question,
            context[: cfg.extractive_chunks],
            sentences=cfg.extractive_sentences,
            timeout=cfg.retrieval_timeout_seconds,
            margin=cfg.extractive_margin,
            floor=cfg.extractive_floor,
        )
        lines = [header or cfg.extractive_header]
        lines += [f'- "{neutralised(s.text)}" [{s.hit.file}#{s.hit.chunk_id}]' for s, _ in best] or [nothing]
        await send({"stage": "answer", "mode": "extractive"})
        for i, line in enumerate(lines):
            await say(line if i == 0 else "\n" + line)
        return how

    async def _replay(self, ask: Ask, cached: dict[str, Any], send: Send, started: float) -> dict[str, Any]:
        """A cached answer: sent as one delta, recorded in the session again, marked ``cache: hit``."""
        meta = dict(cached["meta"])
        debug = meta.pop("debug", {})
        corpora = meta.get("corpora") or {}
        if corpora:
            await send({"stage": "retrieve", "corpora": {c: s["status"] for c, s in corpora.items()}})
        await send({"stage": "answer", "mode": cached["mode"], "context": where(cached["sources"])})
        await send({"delta": cached["answer"]})
        if ask.session:
            cited = [c["chunk_id"] for c in cached["citations"]]
            turn = (cached["answer"], cited, cached["mode"], cached["sources"])
            await self._record(ask.session, ask.question, *turn)
        meta["cache"] = "hit"
        total_ms = (time.perf_counter() - started) * 1000
        if ask.debug:
            meta["debug"] = {**debug, "retrieve_ms": 0.0, "ttft_ms": None, "total_ms": round(total_ms, 1)}
        log.info(
            "answer_composed", mode=cached["mode"], rag=meta.get("rag"), cache="hit", ms=round(total_ms, 1)
        )
        return {**cached, "session": ask.session, "meta": meta}
