"""The ``answer.*`` contract: the shapes and limits of ``answer.ask`` and the session capabilities,
and :class:`AnswerClient`, what the front doors (CLI, web UI, OpenAI gateway, MCP) ask through.

The composer's capabilities are local-only: the node's own front doors call them.

- ``answer.ask`` (streamed): ``input {question, corpora?, session?, no_rag?, debug?, cache?,
  max_tokens?, temperature?, archives?, history?, model?, extractive?}`` (:class:`AskInput`,
  :data:`ASK_FIELDS`)
  -> frames ``{stage: "retrieve", corpora}``, ``{stage: "answer", mode}`` and ``{delta}``, then
  ``output {answer, citations, sources, mode: generated | extractive, session, meta}``.
- ``answer.sessions``: ``{limit?}`` -> ``{sessions: [{id, title, turns, created_ms, updated_ms}]}``.
- ``answer.session.get``: ``{session}`` -> the session with its turns.
- ``answer.session.rename``: ``{session, title}``; ``answer.session.delete``: ``{session}`` (its
  attached documents go too).
- ``answer.attach``: ``{session, name, data}`` -> ``{session, attachment: {id, name, title, pages,
  chunks, created_ms}}``: a document searched with the corpora for that session's questions only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.contracts.base import Caller, Streamed, opened, streamer

__all__ = [
    "ASK",
    "ASK_FIELDS",
    "ATTACH",
    "MAX_ANSWER_TOKENS",
    "MAX_ARCHIVES",
    "MAX_CORPORA",
    "MAX_HISTORY_CHARS",
    "MAX_HISTORY_TURNS",
    "MAX_MODEL_NAME",
    "MODES",
    "SESSIONS",
    "SESSION_DELETE",
    "SESSION_GET",
    "SESSION_RENAME",
    "AnswerClient",
    "AskInput",
]

ASK = "answer.ask"
SESSIONS = "answer.sessions"
SESSION_GET = "answer.session.get"
SESSION_RENAME = "answer.session.rename"
SESSION_DELETE = "answer.session.delete"
ATTACH = "answer.attach"

ASK_FIELDS = frozenset(
    {
        "question",
        "corpora",
        "session",
        "no_rag",
        "debug",
        "cache",
        "max_tokens",
        "temperature",
        "archives",
        "history",
        "model",
        "extractive",
    }
)
"""Every field of ``answer.ask``'s input."""
MODES = ("generated", "extractive")
"""How an answer was made: by the model, or from the retrieved passages alone."""
MAX_CORPORA = 64
"""Most corpora one ask queries (asked for by name, or all reachable ones)."""
MAX_ANSWER_TOKENS = 65_536
MAX_ARCHIVES = 16
"""Archives one ask may name (``rag.search_archives``'s own limit)."""
MAX_HISTORY_TURNS = 200
MAX_HISTORY_CHARS = 400_000
"""Characters of given history in all (``llm.chat``'s own limit on a prompt)."""
MAX_MODEL_NAME = 256


@dataclass(frozen=True)
class AskInput:
    """``answer.ask``'s input as a door gives it: a field left ``None`` is not sent (the composer's
    default applies)."""

    question: str
    corpora: Sequence[str] | None = None
    session: str | None = None
    no_rag: bool | None = None
    debug: bool | None = None
    cache: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    archives: Sequence[Mapping[str, Any]] | None = None
    history: Sequence[Mapping[str, str]] | None = None
    model: str | None = None
    extractive: bool | None = None

    def to_input(self) -> dict[str, Any]:
        inp: dict[str, Any] = {"question": self.question}
        for key in sorted(ASK_FIELDS - {"question"}):
            value = getattr(self, key)
            if value is None:
                continue
            if key in ("corpora", "archives", "history"):
                value = [dict(v) if isinstance(v, Mapping) else v for v in value]
            inp[key] = value
        return inp


class AnswerClient:
    """The ``answer.*`` capabilities of this node, as a front door asks them."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    def asking(self, ask: AskInput, *, timeout: float | None = None) -> AbstractAsyncContextManager[Streamed]:
        """``answer.ask`` streamed: retrieval progress and tokens as frames, then the answer."""
        return opened(streamer(self._caller), ASK, input=ask.to_input(), timeout=timeout)

    async def ask(self, ask: AskInput, *, timeout: float | None = None) -> CallResult:
        """``answer.ask`` answered whole."""
        return await self._caller.call(ASK, input=ask.to_input(), timeout=timeout)

    async def sessions(self, *, limit: int | None = None) -> dict[str, Any]:
        return (await self._caller.call(SESSIONS, input={} if limit is None else {"limit": limit})).output

    async def session(self, session: str) -> dict[str, Any]:
        return (await self._caller.call(SESSION_GET, input={"session": session})).output

    async def rename(self, session: str, title: Any) -> dict[str, Any]:
        return (await self._caller.call(SESSION_RENAME, input={"session": session, "title": title})).output

    async def delete(self, session: str) -> dict[str, Any]:
        return (await self._caller.call(SESSION_DELETE, input={"session": session})).output

    async def attach(
        self, session: str, name: str, data: bytes, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """``answer.attach``: ``data`` (a document's bytes) added to ``session`` alone."""
        inp = {"session": session, "name": name, "data": data}
        return (await self._caller.call(ATTACH, input=inp, timeout=timeout)).output
