"""One question answered: retrieve, merge, select, prompt, generate (or extract), check, cache.

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
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.answer.abstain import DOCUMENTS_DO_NOT_SAY, abstains, best_cosine, nearest_sources
from hearthnet.answer.archives import retrieve_archives
from hearthnet.answer.budget import context_room, pack
from hearthnet.answer.cache import AnswerCache, CacheKey
from hearthnet.answer.citations import CitationCheck, neutralised, sources
from hearthnet.answer.extractive import extract
from hearthnet.answer.frames import Say, Send, announcing, checking, rounded, where
from hearthnet.answer.hits import Hit
from hearthnet.answer.merge import merge
from hearthnet.answer.prompt import Turn, context_head, context_line, history_messages, messages, system_text
from hearthnet.answer.rerank import choose_reranker, rerank
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
from hearthnet.bus.api import BusAPI
from hearthnet.config import AnswerConfig
from hearthnet.contracts.answer import MAX_CORPORA
from hearthnet.contracts.llm import MESSAGE_OVERHEAD, REPLY_OVERHEAD, estimate_tokens
from hearthnet.contracts.rag import MAX_K
from hearthnet.errors import BusError

__all__ = ["Ask", "Composer", "ModelChoice", "choose_model", "should_skip"]

log = structlog.get_logger("hearthnet.answer")

MAX_ANSWER_CHARS = 200_000
"""Most characters of generated text kept from one ``llm.chat`` stream (a provider that never stops)."""
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
        """Archives change without telling this node, and given history is the caller's: neither
        kind of answer is cached."""
        return self.cache and not self.archives and self.history is None


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


@dataclass
class _Selection:
    context: list[Hit]
    history: list[dict[str, str]]
    system: str
    tokens: dict[str, int]
    ranked: list[tuple[Hit, float]]


class Composer:
    def __init__(
        self,
        *,
        bus: BusAPI,
        config: AnswerConfig,
        cache: AnswerCache,
        history: Callable[[str], Awaitable[list[Turn]]],
        record: Callable[[str, str, str, list[str], str], Awaitable[None]],
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
        started = time.perf_counter()
        cfg = self._config
        reachable = reachable_corpora(self._bus)
        left_out = 0
        if ask.corpora is None and not ask.archives:
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
            () if ask.no_rag else names,
            ask.no_rag,
            choice.model if choice else None,
            max_tokens,
            temperature,
            reranker,
        )
        cached = self._cache.get(key) if ask.cacheable else None
        if cached is not None:
            return await self._replay(ask, cached, send, started)

        retrieve_started = time.perf_counter()
        results: dict[str, CorpusResult] = {}
        offline: dict[str, Any] = {}
        attached: dict[str, CorpusResult] = {}
        skipped: str | None = None
        if ask.no_rag:
            rag, skipped = "skipped", "no_rag"
        else:
            async with anyio.create_task_group() as tg:
                if ask.corpora is None and not ask.archives:  # "every corpus": name those away

                    async def away() -> None:
                        offline.update(
                            await unreachable_corpora(self._bus, names, timeout=cfg.retrieval_timeout_seconds)
                        )

                    tg.start_soon(away)
                if ask.session and self._attached is not None:
                    tg.start_soon(self._search_attached, ask.session, ask.question, attached)
                if names or ask.archives:
                    results = await self._retrieve(ask.question, names, reachable, send, ask.archives)
            results.update(attached)
            rag = overall_status(results) if results else "unavailable"
        retrieve_ms = (time.perf_counter() - retrieve_started) * 1000
        hits = [h for r in results.values() for h in r.hits]
        top = max((h.cosine for h in hits), default=None)
        if rag in ("used", "partial") and should_skip(  # only what was searched can be skipped
            ask.question, top, threshold=cfg.similarity_threshold, short_chars=cfg.short_question_chars
        ):
            rag, hits, skipped = "skipped", [], "short_question"
        if ask.history is not None:
            turns = list(ask.history)
        else:
            turns = await self._history(ask.session) if ask.session else []
        # a follow-up ("and where is it kept?") may lean on earlier turns: a model decides then
        abstain = (choice is None or not turns) and abstains(rag, hits, cfg.abstain_threshold)
        ranked, merged_by = merge(
            [] if abstain else [h for h in hits if h.cosine >= cfg.similarity_threshold]
        )
        ranked, reranking = await rerank(
            self._bus, reranker, ask.question, ranked, config=cfg, deadline=deadline
        )
        # Retrieval that answered (even with nothing above the threshold) frames the answer in the
        # documents; skipped or failed retrieval leaves a plain conversation.
        with_context = rag in ("used", "partial")
        selection = self._select(
            ask.question, [(r.hit, r.fused) for r in ranked], turns, choice, max_tokens, with_context
        )

        meta: dict[str, Any] = {
            "rag": rag,
            "corpora": {name: r.summary() for name, r in results.items()},
            "merge": merged_by,
            "corpora_left_out": left_out,
            "model": choice.model if choice else None,
            "cache": "miss",
        }
        if skipped is not None:
            meta["skipped"] = skipped
        if offline:
            meta["corpora_unreachable"] = offline
        send = announcing(send, selection.context)
        check = CitationCheck({h.chunk_id: h for h in selection.context})
        say = checking(send, check)
        ttft_ms: float | None = None
        answered = False
        mode = "extractive"
        if abstain:
            await send({"stage": "answer", "mode": "abstained"})
            await say(DOCUMENTS_DO_NOT_SAY)
            answered, mode = True, "abstained"
            meta["abstain"] = {"best": rounded(best_cosine(hits)), "bar": cfg.abstain_threshold}
        elif choice is not None:
            llm_started = time.perf_counter()
            try:
                first, usage = await self._generate(
                    choice, selection, ask.question, max_tokens, temperature, say, deadline
                )
                answered, mode = True, "generated"
                meta["usage"] = usage
                ttft_ms = None if first is None else (first - llm_started) * 1000
            except _NoToken as exc:  # nothing was streamed yet: the documents still answer
                meta["llm_error"] = exc.code
        if not answered:
            nothing = (
                NOT_SEARCHED
                if skipped == "no_rag"
                else NO_SEARCH
                if rag in ("unavailable", "timeout")
                else NO_PASSAGE
            )
            header = EXTRACTIVE_AS_ASKED if ask.extractive else cfg.extractive_header
            how = await self._extract(ask.question, selection.context, send, say, nothing, header)
            meta["extractive_ranking"] = how
        await say(None)  # what the check held back at the end
        checked = check.checked()
        by_id = {h.chunk_id: h for h in selection.context}
        meta["citations_removed"] = checked.removed
        meta["chunks"] = len(selection.context)
        debug = {
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
        reranking.add_to(meta, debug)
        output: dict[str, Any] = {
            "answer": checked.text,
            "citations": [
                {"chunk_id": c, "file": by_id[c].file, "page": by_id[c].page, "corpus": by_id[c].corpus}
                for c in checked.cited
            ],
            "sources": nearest_sources(hits) if abstain else sources(selection.context, checked.cited),
            "mode": mode,
            "session": ask.session,
            "meta": meta,
        }
        if ask.session:
            await self._record(ask.session, ask.question, checked.text, checked.cited, mode)
        if (
            ask.cacheable
            and rag in ("used", "skipped")
            and "llm_error" not in meta
            and reranking.status != "failed"
        ):
            self._cache.put(key, {**output, "meta": {**meta, "debug": debug}})
        total_ms = (time.perf_counter() - started) * 1000
        if ask.debug:
            meta["debug"] = {**debug, "total_ms": round(total_ms, 1)}
        log.info(
            "answer_composed",
            mode=mode,
            rag=rag,
            corpora=len(results),
            chunks=len(selection.context),
            cited=len(checked.cited),
            citations_removed=checked.removed,
            llm_error=meta.get("llm_error"),
            rerank=reranking.status,
            ms=round(total_ms, 1),
        )
        return output

    # steps --------------------------------------------------------------------------
    async def _search_attached(self, session: str, question: str, into: dict[str, CorpusResult]) -> None:
        """The documents attached to ``session``, searched beside the corpora."""
        assert self._attached is not None
        found = await self._attached(session, question)
        if found is not None:
            into[found.corpus] = found

    async def _retrieve(
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

    def _select(
        self,
        question: str,
        ranked: list[tuple[Hit, float]],
        turns: list[Turn],
        choice: ModelChoice | None,
        max_tokens: int,
        with_context: bool,
    ) -> _Selection:
        """History within its share, then chunks in rank order within what the window leaves."""
        cfg = self._config
        window = choice.context_tokens if choice else None
        instructions = system_text(cfg, [] if with_context else None)
        system_tokens = estimate_tokens(instructions) + MESSAGE_OVERHEAD + REPLY_OVERHEAD
        question_tokens = estimate_tokens(question) + MESSAGE_OVERHEAD
        history_budget = cfg.history_tokens
        if window is not None:
            history_budget = min(
                history_budget, max(0, window - system_tokens - question_tokens - max_tokens) // 2
            )
        history, history_tokens = history_messages(turns, history_budget)
        room = context_room(
            token_budget=cfg.token_budget,
            context_tokens=window,
            fixed_tokens=system_tokens + question_tokens + history_tokens,
            max_tokens=max_tokens,
        )
        lines: dict[str, str] = {}
        costs: dict[str, int] = {}

        def cost(item: tuple[Hit, float]) -> int:
            line = lines[item[0].chunk_id] = context_line(cfg.context_line, item[0])
            c = costs[item[0].chunk_id] = estimate_tokens(line) + 1  # the line and the newline before it
            return c

        kept, context_tokens = pack(
            ranked if with_context else [], budget=room, max_items=cfg.top_k_max, cost=cost
        )
        # What llm.chat checks against its window is the whole prompt's estimate.  A newline
        # ends every run the estimate counts, so the system message's estimate is its head's
        # plus its lines' (tests/unit/answer/test_budget.py): the prompt is summed from the
        # parts costed above, never counted again (on a 40-chunk prompt that took milliseconds).
        fixed = REPLY_OVERHEAD + MESSAGE_OVERHEAD + history_tokens + question_tokens
        head = estimate_tokens(context_head(cfg)) if with_context and kept else 0
        prompt = fixed + head + context_tokens
        while window is not None and kept and prompt + max_tokens > window:
            prompt -= costs[kept.pop()[0].chunk_id]
        context = [h for h, _ in kept]
        context_tokens = sum(costs[h.chunk_id] for h in context)
        if not context:  # no line: the system message is the instructions alone (costed above)
            prompt = fixed + system_tokens - MESSAGE_OVERHEAD - REPLY_OVERHEAD
        system = system_text(cfg, [lines[h.chunk_id] for h in context] if with_context else None)
        return _Selection(
            context=context,
            history=history,
            system=system,
            tokens={
                "system": system_tokens,
                "history": history_tokens,
                "question": question_tokens,
                "context": context_tokens,
                "context_room": room,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "model_window": window or 0,
            },
            ranked=kept,
        )

    async def _generate(
        self,
        choice: ModelChoice,
        selection: _Selection,
        question: str,
        max_tokens: int,
        temperature: float,
        say: Say,
        deadline: float,
    ) -> tuple[float | None, dict[str, Any] | None]:
        """Stream ``llm.chat``'s deltas to ``say`` (which checks their citations); when its first
        token came, and the model's ``usage``.

        A failure before the first token raises :class:`_NoToken` (the caller
        falls back to an extractive answer); after it, the ``BusError`` itself.
        """
        timeout = max(0.001, min(self._config.llm_timeout_seconds, deadline - anyio.current_time()))
        size = 0
        first: float | None = None
        try:
            async with self._bus.stream(
                "llm.chat",
                (1, 0),
                params={"model": choice.model},
                input={
                    "messages": messages(selection.system, selection.history, question),
                    "max_tokens": max_tokens,
                    "temperature": temperature,
                },
                timeout=timeout,
            ) as call:
                await call.end_input()
                async for frame in call.frames():
                    delta = frame.get("delta")
                    if not isinstance(delta, str) or not delta or size >= MAX_ANSWER_CHARS:
                        continue
                    delta = delta[: MAX_ANSWER_CHARS - size]
                    if first is None:
                        first = time.perf_counter()
                    size += len(delta)
                    await say(delta)
                result = await call.result()
        except BusError as exc:
            if first is None:
                raise _NoToken(exc.code) from exc
            raise
        message = result.output.get("message")
        content = message.get("content") if isinstance(message, dict) else message
        usage = result.output.get("usage")
        usage = dict(usage) if isinstance(usage, dict) else None
        if first is None and isinstance(content, str) and content:
            await say(content[:MAX_ANSWER_CHARS])  # a provider that answered without streaming
            return time.perf_counter(), usage
        return first, usage

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
            await self._record(ask.session, ask.question, cached["answer"], cited, cached["mode"])
        meta["cache"] = "hit"
        total_ms = (time.perf_counter() - started) * 1000
        if ask.debug:
            meta["debug"] = {**debug, "retrieve_ms": 0.0, "ttft_ms": None, "total_ms": round(total_ms, 1)}
        log.info(
            "answer_composed", mode=cached["mode"], rag=meta.get("rag"), cache="hit", ms=round(total_ms, 1)
        )
        return {**cached, "session": ask.session, "meta": meta}


class _NoToken(Exception):
    """``llm.chat`` failed before its first token (``code`` is its wire code)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
