"""The Library page's API: corpora, their documents, uploads and deletes."""

from __future__ import annotations

import os
import secrets
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet.blobs.cid import is_cid
from hearthnet.contracts.file import IMPORT
from hearthnet.contracts.folders import FolderClient
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rag import INGEST, PERSONAL, SYSTEM, RagClient, validate_corpus_name
from hearthnet.errors import BadRequest, BusError, Unauthorized
from hearthnet.frontends.client.corpora import list_corpora_of, rag_hosts
from hearthnet.frontends.http import policy
from hearthnet.frontends.http.app import UiState, api, check_text
from hearthnet.frontends.http.responses import json_body, json_response
from hearthnet.frontends.http.tokens import Session
from hearthnet.runtime.disk_full import disk_full_said

__all__ = ["routes"]

LIST_TIMEOUT = 5.0
"""Seconds each node has to answer ``rag.list_corpora`` for the Library page."""
MAX_DOCUMENTS = 5000
"""Documents of one corpus the Library lists (beyond that, it says the list is cut)."""
MAX_FILENAME = 255
WRITE_SIZE = 1 << 20
"""Upload bytes gathered before each write to the temporary file."""


async def corpora_of(state: UiState, session: Session) -> list[dict[str, Any]]:
    """Every corpus of the mesh: those of connected nodes as they answer, the others (their host is
    offline) as ``rag.known_corpora`` knows them from the event log."""
    status = await NodeClient(state.bus.login(session.level)).status()
    own = str(status["node_id"])
    names = {own: state.node_name, **{p["node_id"]: p.get("name") or "" for p in status.get("peers", [])}}
    hosts = rag_hosts(status)
    answers = dict(await list_corpora_of(state.bus.login(session.level), hosts, timeout=LIST_TIMEOUT))
    rows: list[dict[str, Any]] = []
    listed: set[tuple[str, str]] = set()
    for node in hosts:
        answer = answers[node]
        if isinstance(answer, BusError):
            continue
        for c in answer:
            if c.get("name") == PERSONAL and not session.owner:
                continue  # the node owner's own corpus
            listed.add((node, str(c.get("name"))))
            # a store corpus answers with its node; an archive says whether its server answered
            online = bool(c.get("online", True))
            rows.append({**c, "node": node, "node_name": names.get(node, ""), "online": online})
    known = await RagClient(state.bus.login(session.level)).known_corpora()
    for corpus in known:
        name = str(corpus.get("name"))
        for host in corpus.get("hosts", []):
            node = str(host.get("node"))
            if (node, name) in listed or not host.get("hosting"):
                continue
            if name == PERSONAL and not session.owner:
                continue
            rows.append(
                {
                    "name": name,
                    "docs": host.get("docs"),
                    "chunks": host.get("chunks") or None,
                    "size_bytes": None,
                    "embedding_model": None,
                    "node": node,
                    "node_name": names.get(node) or host.get("node_name") or state.nodes.name_of(node),
                    "online": bool(host.get("online")) and node in answers,
                    "last_seen": host.get("last_seen"),
                }
            )
    duplicates = {str(c.get("name")) for c in known if c.get("duplicate")}
    copies = _replicas(known)
    for row in rows:
        row["duplicate"] = row["name"] in duplicates
        row.update(copies.get((str(row["name"]), str(row["node"])), {}))
    rows.sort(key=lambda r: (str(r["name"]), str(r["node"])))
    return rows


def _replicas(known: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per ``(corpus, node)``: a replica's ``replica_of`` and ``behind``; its host's ``replicas`` (how many
    are online)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for corpus in known:
        name = str(corpus.get("name"))
        copies = [h for h in corpus.get("hosts", []) if h.get("role") == "replica" and h.get("replica_of")]
        for h in copies:
            out[(name, str(h["node"]))] = {"replica_of": h["replica_of"], "behind": h.get("behind", 0)}
        for host in {str(h["replica_of"]) for h in copies}:
            out[(name, host)] = {"replicas": sum(1 for h in copies if h["replica_of"] == host)}
    return out


async def _corpora(state: UiState, request: Request, session: Session) -> Response:
    return json_response({"corpora": await corpora_of(state, session)})


def _corpus(value: Any, session: Session, *, writing: bool) -> str:
    corpus = validate_corpus_name(value)
    if writing and corpus == SYSTEM:
        raise BadRequest("corpus system is read-only")
    if corpus == PERSONAL and not session.owner:
        raise Unauthorized("the personal corpus is the node owner's")
    return corpus


def _node(value: Any) -> str | None:
    if value in (None, ""):
        return None
    return check_text(value, "node", 200)


async def _documents(state: UiState, request: Request, session: Session) -> Response:
    corpus = _corpus(request.query_params.get("corpus"), session, writing=False)
    node = _node(request.query_params.get("node"))
    documents: list[dict[str, Any]] = []
    after: str | None = None
    provider = node
    while len(documents) < MAX_DOCUMENTS:  # rag.list_documents answers in pages
        result = await RagClient(state.bus.login(session.level)).list_documents(
            corpus, after=after, provider=provider, timeout=LIST_TIMEOUT
        )
        provider = result.provider  # every page from the node that answered the first
        documents.extend(result.output.get("documents") or [])
        after = result.output.get("next")
        if not after:
            break
    return json_response(
        {"documents": documents, "corpus": corpus, "node": provider, "truncated": bool(after)}
    )


async def _delete(state: UiState, request: Request, session: Session) -> Response:
    body = await json_body(request)
    corpus = _corpus(body.get("corpus"), session, writing=True)
    doc_cid = body.get("doc_cid")
    if not is_cid(doc_cid):
        raise BadRequest("doc_cid must be a blake3:<hex> CID")
    result = await RagClient(state.bus.login(session.level)).delete(
        corpus, str(doc_cid), provider=_node(body.get("node"))
    )
    return json_response({**result.output, "node": result.provider})


def _filename(value: str | None) -> str:
    """The uploaded file's name as the document's file name: its last part, printable, bounded."""
    name = unicodedata.normalize("NFC", (value or "").replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if not name or name in (".", "..") or len(name) > MAX_FILENAME or not name.isprintable():
        raise BadRequest("the file needs a name of 1..255 printable characters")
    return name


async def _upload(state: UiState, request: Request, session: Session) -> Response:
    for capability in (IMPORT, INGEST):
        policy.check(session.level, capability)  # before a byte is read
    corpus = _corpus(request.query_params.get("corpus"), session, writing=True)
    name = _filename(request.query_params.get("name"))
    cap = state.config.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > cap):
        return json_response({"error": "bad_request", "message": _too_big(cap)}, 413)
    path = state.jobs.upload_dir / f"{secrets.token_hex(12)}.part"
    try:
        with disk_full_said(state.jobs.upload_dir, "the uploaded file"):
            size = await _receive(request, path, cap)
    except ClientDisconnect:  # the browser went away mid-upload: nothing kept, nobody to answer
        return Response(status_code=400)
    if size is None:
        return json_response({"error": "bad_request", "message": _too_big(cap)}, 413)
    if size == 0:
        await anyio.to_thread.run_sync(path.unlink)
        raise BadRequest(f"{name} is empty (0 bytes)")
    job = state.jobs.start(
        token_id=session.token_id, level=session.level, name=name, corpus=corpus, path=path, size=size
    )
    return json_response({"job": job.to_json()}, 202)


def _too_big(cap: int) -> str:
    return f"the file is larger than this node accepts through the web UI ({cap // (1 << 20)} MiB)"


async def _receive(request: Request, path: Path, cap: int) -> int | None:
    """Stream the body to ``path`` (0600); its size, or ``None`` (and no file) past ``cap`` bytes."""
    fd = await anyio.to_thread.run_sync(lambda: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    size = 0
    kept = False
    try:
        with os.fdopen(fd, "wb") as out:
            pending: list[bytes] = []
            waiting = 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    return None
                pending.append(chunk)
                waiting += len(chunk)
                if waiting >= WRITE_SIZE:
                    data, pending, waiting = b"".join(pending), [], 0
                    await anyio.to_thread.run_sync(out.write, data)
            if pending:
                await anyio.to_thread.run_sync(out.write, b"".join(pending))
        kept = True
        return size
    finally:
        if not kept:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))


async def _jobs(state: UiState, request: Request, session: Session) -> Response:
    return json_response({"jobs": [j.to_json() for j in state.jobs.of(session.token_id)]})


async def _folders(state: UiState, request: Request, session: Session) -> Response:
    """The folders this node keeps indexed (``rag.watch``): its owner's only (paths on its disk)."""
    if not session.owner:
        return json_response({"folders": []})
    return json_response({"folders": await FolderClient(state.bus.login(session.level)).list()})


def routes(state: UiState) -> list[BaseRoute]:
    def r(path: str, handler: Callable[..., Awaitable[Response]], methods: list[str] | None = None) -> Route:
        return Route(path, api(state, handler), methods=methods or ["GET"])

    return [
        r("/api/corpora", _corpora),
        r("/api/documents", _documents),
        r("/api/documents/delete", _delete, ["POST"]),
        r("/api/upload", _upload, ["POST"]),
        r("/api/jobs", _jobs),
        r("/api/folders", _folders),
    ]
