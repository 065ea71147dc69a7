"""``answer.ask@1.0`` and the session capabilities, hosted in the node for its front doors.

All are local-only (never advertised, refused to peers): the CLI, the web UI
and the HTTP gateway of this node share one cache and one session store.

- ``answer.ask`` (streamed): ``input {question, corpora?, session?, no_rag?,
  debug?, cache?, max_tokens?, temperature?}`` -> frames ``{stage: "retrieve",
  corpora}`` and ``{delta}``, then ``{answer, citations, sources, mode, session, meta}``.
- ``answer.sessions``: ``{limit?}`` -> ``{sessions: [{id, title, turns, created_ms, updated_ms}]}``.
- ``answer.session.get``: ``{session}`` -> the session with its turns.
- ``answer.session.rename``: ``{session, title}``; ``answer.session.delete``: ``{session}``.

The cache learns of document changes through :meth:`AnswerService.events_stored`
(``rag.document.ingested`` / ``rag.document.deleted`` events, local or pulled)
and :meth:`AnswerService.corpus_changed` (this node's RAG service, which also
covers the never-announced ``personal`` corpus).  No question, context or answer
text is ever logged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import structlog

from hearthnet.answer.attachments import Attachments
from hearthnet.answer.cache import AnswerCache
from hearthnet.answer.compose import Ask, Composer
from hearthnet.answer.prompt import Turn
from hearthnet.answer.sessions import SessionStore, validate_session_id, validate_title
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler, Registration
from hearthnet.config import AnswerConfig
from hearthnet.contracts.answer import (
    ASK_FIELDS,
    ATTACH,
    MAX_ANSWER_TOKENS,
    MAX_ARCHIVES,
    MAX_CORPORA,
    MAX_HISTORY_CHARS,
    MAX_HISTORY_TURNS,
    MAX_MODEL_NAME,
)
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import DELETED, INGESTED, MAX_K, UPDATED, is_corpus_name
from hearthnet.contracts.reading import MAX_READ_BYTES, checked_file_name
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.events.envelope import Event

__all__ = ["DOCUMENT_EVENTS", "AnswerService", "parse_ask"]

log = structlog.get_logger("hearthnet.answer")

T = TypeVar("T")

DOCUMENT_EVENTS = frozenset({INGESTED, DELETED, UPDATED})
"""Events that change a corpus's documents: cached answers drawn from it are dropped."""
SESSIONS_PAGE = 100
SESSIONS_MAX_PAGE = 1000


def _flag(inp: Mapping[str, Any], key: str, default: bool) -> bool:
    value = inp.get(key, default)
    if not isinstance(value, bool):
        raise BadRequest(f"input.{key} must be true or false")
    return value


def parse_ask(inp: Mapping[str, Any], config: AnswerConfig) -> Ask:
    """``answer.ask``'s input, every field bounded; ``bad_request`` naming the field otherwise."""
    check_input_keys(inp, set(ASK_FIELDS), "answer.ask")
    question = inp.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRequest("input.question must be a non-empty string")
    if len(question) > config.max_question_chars:
        raise BadRequest(
            f"input.question is {len(question)} characters long; at most {config.max_question_chars}"
        )
    corpora: tuple[str, ...] | None = None
    raw = inp.get("corpora")
    if raw is not None:
        if not isinstance(raw, list) or not raw or len(raw) > MAX_CORPORA:
            raise BadRequest(
                f"input.corpora must be a list of 1..{MAX_CORPORA} corpus names "
                "(omit it to ask every reachable corpus, or set no_rag)"
            )
        for name in raw:
            if not is_corpus_name(name):
                raise BadRequest(
                    f"input.corpora: {str(name)[:70]!r} is not a corpus name (a-z, 0-9, '-', 1-64)"
                )
        corpora = tuple(sorted(set(raw)))
    session = inp.get("session")
    if session is not None:
        session = validate_session_id(session)
    max_tokens = inp.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or not 1 <= max_tokens <= MAX_ANSWER_TOKENS):
        raise BadRequest(f"input.max_tokens must be an integer in 1..{MAX_ANSWER_TOKENS}")
    temperature = inp.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 2
        ):
            raise BadRequest("input.temperature must be a number in 0..2")
        temperature = float(temperature)
    archives = _archives(inp.get("archives"))
    history = _history(inp.get("history"))
    if history is not None and session is not None:
        raise BadRequest("input.history and input.session exclude each other: a session keeps its own turns")
    if inp.get("no_rag") is True and archives:
        raise BadRequest("input.archives cannot be searched with no_rag")
    model = inp.get("model")
    if model is not None and (
        not isinstance(model, str)
        or not model.strip()
        or len(model) > MAX_MODEL_NAME
        or not model.isprintable()
    ):
        raise BadRequest(f"input.model must be a model name of 1..{MAX_MODEL_NAME} printable characters")
    return Ask(
        question=question,
        corpora=corpora,
        session=session,
        no_rag=_flag(inp, "no_rag", False),
        debug=_flag(inp, "debug", config.debug),
        cache=_flag(inp, "cache", True),
        max_tokens=max_tokens,
        temperature=temperature,
        archives=archives,
        history=history,
        model=model,
        extractive=_flag(inp, "extractive", False),
    )


def _archives(raw: Any) -> tuple[Mapping[str, Any], ...]:
    """``input.archives``: the seeds' ``rag_config.archives`` entries, checked for shape here and
    field by field by ``rag.search_archives``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or len(raw) > MAX_ARCHIVES:
        raise BadRequest(f"input.archives must be a list of 1..{MAX_ARCHIVES} archives (rag_config.archives)")
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequest(f"input.archives[{i}] must be an object with a name")
    return tuple(raw)


def _history(raw: Any) -> tuple[Turn, ...] | None:
    """``input.history``: earlier ``{question, answer}`` turns, oldest first."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_HISTORY_TURNS:
        raise BadRequest(f"input.history must be a list of at most {MAX_HISTORY_TURNS} turns")
    turns: list[Turn] = []
    size = 0
    for i, entry in enumerate(raw):
        question = entry.get("question") if isinstance(entry, dict) else None
        answer = entry.get("answer") if isinstance(entry, dict) else None
        if not isinstance(question, str) or not isinstance(answer, str):
            raise BadRequest(f"input.history[{i}] must be {{question, answer}} strings")
        size += len(question) + len(answer)
        turns.append(Turn(question, answer))
    if size > MAX_HISTORY_CHARS:
        raise BadRequest(f"input.history holds {size} characters; at most {MAX_HISTORY_CHARS}")
    return tuple(turns)


class AnswerService:
    name = "answer"

    def __init__(
        self,
        *,
        bus: BusAPI,
        config: AnswerConfig,
        sessions_path: Path,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._bus = bus
        self._config = config
        self._sessions_path = sessions_path
        self._store: SessionStore | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self.cache = (
            AnswerCache(ttl=config.cache_ttl_seconds, max_entries=config.cache_max_entries)
            if clock is None
            else AnswerCache(ttl=config.cache_ttl_seconds, max_entries=config.cache_max_entries, clock=clock)
        )
        self.attachments = Attachments(bus, self._in_db, embed_timeout=config.retrieval_timeout_seconds)
        self._composer = Composer(
            bus=bus,
            config=config,
            cache=self.cache,
            history=self._history,
            record=self._record,
            attached=lambda session, question: self.attachments.search(
                session, question, k=min(MAX_K, config.top_k_max), timeout=config.retrieval_timeout_seconds
            ),
        )
        self.asks = 0
        self.modes: dict[str, int] = {"generated": 0, "extractive": 0}

    # Service protocol -------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self._config
        self._store = await anyio.to_thread.run_sync(
            lambda: SessionStore(self._sessions_path, max_sessions=cfg.max_sessions, max_turns=cfg.max_turns)
        )

    async def stop(self) -> None:
        if self._store is not None:
            await anyio.to_thread.run_sync(self._store.close, limiter=self._limiter)
            self._store = None

    def health(self) -> dict[str, Any]:
        return {
            "asks": self.asks,
            "modes": dict(self.modes),
            "cache": {"entries": len(self.cache), "hits": self.cache.hits, "misses": self.cache.misses},
        }

    def registrations(self) -> list[Registration]:
        cfg = self._config

        def local(name: str, handler: Handler, **kw: Any) -> Registration:
            kw.setdefault("timeout_seconds", 30.0)
            return Registration(CapabilityDescriptor(name, (1, 0), local_only=True, **kw), handler)

        return [
            local(
                "answer.ask",
                self._handle_ask,
                streaming=True,
                max_concurrent=8,
                timeout_seconds=cfg.retrieval_timeout_seconds + cfg.llm_timeout_seconds + 30.0,
                description="answer a question from the community's documents, with citations",
            ),
            local("answer.sessions", self._handle_sessions, idempotent=True),
            local("answer.session.get", self._handle_session_get, idempotent=True),
            local("answer.session.rename", self._handle_session_rename, idempotent=True),
            local("answer.session.delete", self._handle_session_delete, idempotent=True),
            local(
                ATTACH,
                self._handle_attach,
                max_concurrent=2,
                timeout_seconds=600.0,
                description="add a document to one chat session (never to a corpus)",
            ),
        ]

    # cache invalidation -------------------------------------------------------------------
    def events_stored(self, events: Sequence[Event]) -> None:
        """New events in the log (appended here or pulled from a peer)."""
        for event in events:
            corpus = event.data.get("corpus") if event.event_type in DOCUMENT_EVENTS else None
            if isinstance(corpus, str):
                self.corpus_changed(corpus)

    def corpus_changed(self, corpus: str) -> None:
        dropped = self.cache.invalidate_corpus(corpus)
        if dropped:
            log.info("answer_cache_invalidated", corpus=corpus, entries=dropped)

    # sessions (one worker thread at a time) ---------------------------------------------------
    async def _in_store(self, fn: Callable[[SessionStore], T]) -> T:
        store = self._store
        if store is None:
            raise BadRequest("the answer service is not running")
        return await anyio.to_thread.run_sync(lambda: fn(store), limiter=self._limiter)

    async def _in_db(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._in_store(lambda s: s.run(fn))

    async def _history(self, session: str) -> list[Turn]:
        return await self._in_store(lambda s: s.history(session, turns=self._config.max_turns))

    async def _record(
        self,
        session: str,
        question: str,
        answer: str,
        cited: list[str],
        mode: str,
        sources: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """One turn kept, with the passages a reader opens again: the cited ones (the nearest for an
        abstained answer)."""
        kept = [dict(x) for x in sources if x.get("cited") or x.get("nearest")]
        # shielded: an answer already sent must land in its session even if the caller walks away
        with anyio.CancelScope(shield=True):
            await self._in_store(
                lambda s: s.append(
                    session, question=question, answer=answer, cited=cited, mode=mode, sources=kept
                )
            )

    # handlers ----------------------------------------------------------------------------
    def _check_local(self, ctx: CallContext) -> None:
        if not ctx.is_local:  # the bus refuses local-only capabilities to peers; never rely on one check
            raise Unauthorized(f"{ctx.capability} serves this node's own front doors only")

    async def _handle_ask(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        ask = parse_ask(ctx.input, self._config)
        output = await self._composer.ask(ask, ctx.send, deadline=ctx.deadline)
        self.asks += 1
        self.modes[output["mode"]] = self.modes.get(output["mode"], 0) + 1
        return output

    async def _handle_sessions(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        check_input_keys(ctx.input, {"limit"}, "answer.sessions")
        limit = ctx.input.get("limit", SESSIONS_PAGE)
        if type(limit) is not int or not 1 <= limit <= SESSIONS_MAX_PAGE:
            raise BadRequest(f"input.limit must be an integer in 1..{SESSIONS_MAX_PAGE}")
        return {"sessions": await self._in_store(lambda s: s.sessions(limit=limit))}

    async def _handle_session_get(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        check_input_keys(ctx.input, {"session"}, "answer.session.get")
        session = validate_session_id(ctx.input.get("session"))
        return await self._in_store(lambda s: s.get(session))

    async def _handle_session_rename(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        check_input_keys(ctx.input, {"session", "title"}, "answer.session.rename")
        session = validate_session_id(ctx.input.get("session"))
        title = validate_title(ctx.input.get("title"))
        await self._in_store(lambda s: s.rename(session, title))
        return {"session": session, "title": title}

    async def _handle_session_delete(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        check_input_keys(ctx.input, {"session"}, "answer.session.delete")
        session = validate_session_id(ctx.input.get("session"))
        await self._in_store(lambda s: s.delete(session))  # its attachments go by the cascade
        self.cache.invalidate_session(session)
        return {"session": session, "deleted": True}

    async def _handle_attach(self, ctx: CallContext) -> dict[str, Any]:
        self._check_local(ctx)
        check_input_keys(ctx.input, {"session", "name", "data"}, ATTACH)
        session = validate_session_id(ctx.input.get("session"))
        name, data = checked_file_name(ctx.input.get("name"), "input.name"), ctx.input.get("data")
        if not isinstance(data, bytes) or not data or len(data) > MAX_READ_BYTES:
            raise BadRequest(f"input.data must be the document's bytes: 1..{MAX_READ_BYTES:,} of them")
        attachment = await self.attachments.attach(session, name, data, deadline=ctx.deadline)
        self.cache.invalidate_session(session)  # an answer cached before did not search it
        log.info("document_attached", chunks=attachment["chunks"], pages=attachment["pages"])
        return {"session": session, "attachment": attachment}
