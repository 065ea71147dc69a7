"""The Ask page's API: a question answered by ``answer.ask``, streamed as server-sent events, the
chats (``answer.session.*``) of the person signed in, documents attached to one chat
(``answer.attach``), and the models a chat may be answered by.

The ``done`` event carries ``left_out``: why corpora were left out of the answer, in the words the
CLI's ``(left out: …)`` note uses (:mod:`~hearthnet.frontends.client.left_out`).

Chats belong to a login: the UI names each new chat ``web.<owner>.<random>``, where the owner is
``owner`` for the node's owner and the token id for a person, and shows and changes only that
login's chats (the owner also sees chats made elsewhere, e.g. by the CLI).  A person's question
never searches the owner's ``personal`` corpus.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet.contracts.answer import ASK, ATTACH, MAX_MODEL_NAME, AnswerClient, AskInput
from hearthnet.contracts.llm import CAPABILITY as CHAT
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.reading import MAX_FILENAME, MAX_READ_BYTES
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.frontends.client.corpora import MAX_CORPORA, requested_corpora, searchable_corpora
from hearthnet.frontends.client.left_out import left_out
from hearthnet.frontends.http import policy
from hearthnet.frontends.http.app import UiState, api, check_text
from hearthnet.frontends.http.bearer import Caller, GatedCalls
from hearthnet.frontends.http.responses import Emit, EventStream, json_body, json_response
from hearthnet.frontends.http.tokens import Session

__all__ = ["routes"]

WEB = "web."
MAX_QUESTION = 4000
CHATS_LIMIT = 1000


def owner_key(session: Session) -> str:
    return "owner" if session.owner else session.token_id


def _mine(session: Session, chat_id: str) -> bool:
    if chat_id.startswith(f"{WEB}{owner_key(session)}."):
        return True
    return session.owner and not chat_id.startswith(f"{WEB}tok_")  # the owner's CLI chats too


def _chat_id(session: Session, value: Any) -> str:
    chat = check_text(value, "session", 64)
    if not _mine(session, chat):
        raise NotFound(f"no chat {chat}")  # another person's: as if it did not exist
    return chat


async def _corpora(state: UiState, session: Session, requested: Any) -> list[str] | None:
    """The corpora to search: those asked for, or every one this login may search (``None``: let
    the composer ask every reachable corpus, for the owner) — the rule the gateway and MCP follow
    (:func:`~hearthnet.frontends.client.corpora.requested_corpora`)."""
    calls = GatedCalls(state.bus, Caller(session.token_id, session.name, session.level, session.owner))
    if requested is None or requested == []:
        return None if session.owner else (await searchable_corpora(calls) or None)
    if not isinstance(requested, list):
        raise BadRequest(f"corpora must be a list of at most {MAX_CORPORA} corpus names")
    return requested_corpora(calls, requested)


async def _ask(state: UiState, request: Request, session: Session) -> Response:
    body = await json_body(request)
    question = check_text(body.get("question"), "question", MAX_QUESTION)
    chat = body.get("session")
    chat_id = _chat_id(session, chat) if chat else f"{WEB}{owner_key(session)}.{secrets.token_hex(6)}"
    debug, extractive = body.get("debug", False), body.get("extractive", False)
    if not isinstance(debug, bool) or not isinstance(extractive, bool):
        raise BadRequest("debug and extractive must be true or false")
    model = body.get("model")
    if model is not None:
        model = check_text(model, "model", MAX_MODEL_NAME)
    corpora = await _corpora(state, session, body.get("corpora"))
    # corpora None: every reachable one for the owner; nothing this person may search yet: the
    # model answers alone
    ask = AskInput(
        question,
        session=chat_id,
        debug=debug,
        corpora=corpora,
        no_rag=True if corpora is None and not session.owner else None,
        model=model,
        extractive=True if extractive else None,
    )
    policy.check(session.level, ASK)  # before the stream starts: a refusal is a 403

    async def produce(emit: Emit) -> None:
        await emit("chat", {"session": chat_id})
        async with AnswerClient(state.bus.login(session.level)).asking(ask) as call:
            async for frame in call.frames():
                await emit("frame", frame)
            result = await call.result()
        notes = await _left_out(state, session, result.output.get("meta") or {})
        await emit("done", {**result.output, "session": chat_id, "left_out": notes})

    return EventStream(produce, state.closing)


async def _left_out(state: UiState, session: Session, meta: dict[str, Any]) -> list[str]:
    """Why corpora were left out of the answer (as the CLI says it); none if the node cannot say."""
    calls = GatedCalls(state.bus, Caller(session.token_id, session.name, session.level, session.owner))
    try:
        return await left_out(calls, meta)
    except BusError:
        return []


async def _models(state: UiState, request: Request, session: Session) -> Response:
    """The ``llm.chat`` models of the mesh a chat may be answered by, and whether it is the one the
    node would pick (the largest window); the page adds "extractive only"."""
    status = await NodeClient(state.bus.login(session.level)).status()
    found: dict[str, dict[str, Any]] = {}
    for cap in status.get("capabilities", []):
        params = cap.get("params") or {}
        model = params.get("model")
        if cap.get("capability") != f"{CHAT}@1.0" or not isinstance(model, str) or not model:
            continue
        entry = found.setdefault(model, {"id": model, "context_tokens": 0, "nodes": 0})
        window = params.get("context_tokens")
        if type(window) is int:
            entry["context_tokens"] = max(entry["context_tokens"], window)
        entry["nodes"] += 1
    return json_response({"models": [found[m] for m in sorted(found)]})


async def _attach(state: UiState, request: Request, session: Session) -> Response:
    """A document (the raw body, at most ``MAX_READ_BYTES``) added to one chat: the chat given, or
    a new one of this login."""
    policy.check(session.level, ATTACH)  # before a byte is read
    chat = request.query_params.get("session")
    chat_id = _chat_id(session, chat) if chat else f"{WEB}{owner_key(session)}.{secrets.token_hex(6)}"
    name = check_text(request.query_params.get("name"), "name", MAX_FILENAME)
    declared = request.headers.get("content-length")
    too_big = {"error": "bad_request", "message": f"a chat's document is at most {MAX_READ_BYTES:,} bytes"}
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_READ_BYTES):
        return json_response(too_big, 413)
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_READ_BYTES:
            return json_response(too_big, 413)
        parts.append(chunk)
    if size == 0:
        raise BadRequest(f"{name} is empty (0 bytes)")
    out = await AnswerClient(state.bus.login(session.level)).attach(chat_id, name, b"".join(parts))
    return json_response({**out, "session": chat_id})


async def _chats(state: UiState, request: Request, session: Session) -> Response:
    listing = await AnswerClient(state.bus.login(session.level)).sessions(limit=CHATS_LIMIT)
    chats = [
        c for c in listing.get("sessions", []) if isinstance(c, dict) and _mine(session, str(c.get("id")))
    ]
    return json_response({"sessions": chats})


async def _chat(state: UiState, request: Request, session: Session) -> Response:
    chat = _chat_id(session, request.query_params.get("session"))
    return json_response(await AnswerClient(state.bus.login(session.level)).session(chat))


async def _rename(state: UiState, request: Request, session: Session) -> Response:
    body = await json_body(request)
    chat = _chat_id(session, body.get("session"))
    return json_response(await AnswerClient(state.bus.login(session.level)).rename(chat, body.get("title")))


async def _delete(state: UiState, request: Request, session: Session) -> Response:
    body = await json_body(request)
    chat = _chat_id(session, body.get("session"))
    return json_response(await AnswerClient(state.bus.login(session.level)).delete(chat))


def routes(state: UiState) -> list[BaseRoute]:
    def r(path: str, handler: Callable[..., Awaitable[Response]], methods: list[str] | None = None) -> Route:
        return Route(path, api(state, handler), methods=methods or ["GET"])

    return [
        r("/api/ask", _ask, ["POST"]),
        r("/api/chats", _chats),
        r("/api/chat", _chat),
        r("/api/chats/rename", _rename, ["POST"]),
        r("/api/chats/delete", _delete, ["POST"]),
        r("/api/chats/attach", _attach, ["POST"]),
        r("/api/models", _models),
    ]
