"""The MCP server's tools: ``search_archives``, ``rag_query``, ``list_corpora``, ``ask``.

Each tool has a JSON Schema for its arguments (enforced here with ``jsonschema`` before any
call: a violation is ``bad_request`` naming the field) and runs through a
:class:`~hearthnet.frontends.client.corpora.Calls`, so one code serves the owner over stdio and a
person's API key over HTTP with that key's level.  A bus error becomes a tool error whose text
is ``<code>: <message>`` and whose structured content is ``{error, message}``.

- ``search_archives`` is the seeds' tool (``rag.search_archives``): its text is the seeds'
  German format byte for byte (or JSON with ``format: "json"``).
- ``rag_query`` asks ``rag.query`` of one corpus or several (each its own ranking).
- ``list_corpora`` lists the corpora of the mesh's connected nodes.
- ``ask`` answers with ``answer.ask`` (citations checked, sources listed).  A person's chats
  are kept apart: session ``s`` of an API key is stored as ``mcp.<token id>.s``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import jsonschema

from hearthnet.contracts.answer import AnswerClient, AskInput
from hearthnet.contracts.node import NodeClient, offers
from hearthnet.contracts.rag import CORPUS_PATTERN, DEFAULT_K, LIST_CORPORA, PERSONAL, RagClient
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.frontends.client.corpora import Calls, requested_corpora, searchable_corpora

__all__ = ["TOOLS", "Tool", "ToolError", "run_tool"]

MAX_QUERY = 8192
LIST_TIMEOUT = 5.0
"""Seconds each node has to answer ``rag.list_corpora``."""
QUERIES_AT_ONCE = 8
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"

_ARCHIVE_ENTRY: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One archive: a ChromaDB collection the seeds' document platform made.",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Shown in the answer."},
        "collection_name": {"type": "string", "minLength": 3, "maxLength": 512},
        "chromadb_url": {
            "type": "string",
            "description": "Its ChromaDB server; asked only if a node of the mesh serves it or the "
            "node's rag.archive_urls allows it.",
        },
        "embedding_model": {"type": "string", "minLength": 1, "maxLength": 256},
    },
    "required": ["name", "collection_name"],
}
_RAG_CONFIG: Final[dict[str, Any]] = {
    "type": "object",
    "description": "The seeds' rag_config: the archives to search (replaces the node's default).",
    "properties": {"archives": {"type": "array", "maxItems": 16, "items": _ARCHIVE_ENTRY}},
}
_CORPUS: Final[dict[str, Any]] = {"type": "string", "pattern": f"^{CORPUS_PATTERN}$"}


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[Calls, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]
    """The tool: its text for the model, and its structured content."""


class ToolError(Exception):
    """A failed tool call as the client sees it: a bus error's code and message."""

    def __init__(self, error: BusError) -> None:
        super().__init__(error.message)
        self.error = error


# -- search_archives ----------------------------------------------------------------------------
async def _search_archives(calls: Calls, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    form = args.get("format", "text")
    result = await RagClient(calls).search_archives(
        args["query"], format=form, top_k=args.get("top_k"), rag_config=args.get("rag_config")
    )
    out = result.output
    if form == "json":
        return json.dumps(out, ensure_ascii=False), out
    return str(out.get("text", "")), {"status": out.get("status"), "text": out.get("text")}


# -- rag_query ------------------------------------------------------------------------------------
async def _rag_query(calls: Calls, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if ("corpus" in args) == ("corpora" in args):
        raise BadRequest("give corpus or corpora (one of them)")
    names = requested_corpora(calls, [args["corpus"]] if "corpus" in args else args["corpora"])
    if not names:
        raise BadRequest("corpora must name at least one corpus")
    rag = RagClient(calls)
    answers: dict[str, list[Any] | BusError] = {}
    limiter = anyio.CapacityLimiter(QUERIES_AT_ONCE)

    async def one(corpus: str) -> None:
        async with limiter:
            try:
                out = await rag.query(
                    corpus, args["query"], k=args.get("k", DEFAULT_K), filter=args.get("filter")
                )
                chunks = out.output.get("chunks")
                answers[corpus] = list(chunks) if isinstance(chunks, list) else []
            except BusError as exc:
                answers[corpus] = exc

    async with anyio.create_task_group() as tg:
        for corpus in names:
            tg.start_soon(one, corpus)
    failed = [a for a in answers.values() if isinstance(a, BusError)]
    if failed and len(failed) == len(names):
        raise failed[0]  # nothing answered: the error itself
    results = []
    corpora: dict[str, Any] = {}
    for corpus in names:
        answer = answers[corpus]
        if isinstance(answer, BusError):
            corpora[corpus] = {"status": "error", "error": answer.to_wire()}
            continue
        corpora[corpus] = {"status": "ok", "hits": len(answer)}
        for chunk in answer:
            if isinstance(chunk, dict):
                results.append(
                    {
                        "corpus": corpus,
                        "rank": chunk.get("rank"),
                        "score": chunk.get("score"),
                        "text": chunk.get("text"),
                        "metadata": chunk.get("metadata"),
                    }
                )
    doc = {"results": results, "corpora": corpora}
    return json.dumps(doc, ensure_ascii=False), doc


# -- list_corpora ---------------------------------------------------------------------------------
async def _list_corpora(calls: Calls, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    status = await NodeClient(calls).status()
    own = str(status.get("node_id"))
    names = {
        own: str(status.get("name") or ""),
        **{p["node_id"]: p.get("name") or "" for p in status.get("peers", [])},
    }
    hosts = sorted({str(c["node"]) for c in status.get("capabilities", []) if offers(c, LIST_CORPORA)})
    answers: dict[str, list[Any] | BusError] = {}

    async def ask(node: str) -> None:
        try:
            answers[node] = await RagClient(calls).list_corpora(node, timeout=LIST_TIMEOUT)
        except BusError as exc:
            answers[node] = exc

    async with anyio.create_task_group() as tg:
        for node in hosts:
            tg.start_soon(ask, node)
    rows: list[dict[str, Any]] = []
    unreachable: list[dict[str, Any]] = []
    for node in hosts:
        answer = answers[node]
        if isinstance(answer, BusError):
            unreachable.append({"node": node, "node_name": names.get(node, ""), **answer.to_wire()})
            continue
        for corpus in answer:
            if not isinstance(corpus, dict) or (corpus.get("name") == PERSONAL and not calls.owner):
                continue
            rows.append({**corpus, "node": node, "node_name": names.get(node, "")})
    rows.sort(key=lambda r: (str(r.get("name")), r["node"]))
    doc = {"corpora": rows, "unreachable": unreachable}
    return json.dumps(doc, ensure_ascii=False), doc


# -- ask ------------------------------------------------------------------------------------------
def _session_of(calls: Calls, given: str) -> str:
    """The stored session of a caller's session name: the owner's as named, a key's under its id."""
    return given if calls.owner else f"mcp.{calls.key}.{given}"


def _sources_text(out: Mapping[str, Any]) -> str:
    lines = []
    for i, source in enumerate(out.get("sources") or [], 1):
        if not isinstance(source, dict):
            continue
        place = source.get("place") or (f"page {source['page']}" if source.get("page") is not None else "")
        page = f", {place}" if place else ""
        cited = " (cited)" if source.get("cited") else ""
        lines.append(
            f"[{i}] {source.get('file')}#{source.get('chunk_id')}{page}, {source.get('corpus')}{cited}"
        )
    return "\n".join(lines)


async def _ask(calls: Calls, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    archives = (args.get("rag_config") or {}).get("archives") or []
    if "corpora" in args:
        corpora = requested_corpora(calls, args["corpora"])
    elif archives or calls.owner:
        corpora = []  # archives alone, or the owner's default (every reachable corpus)
    else:
        corpora = await searchable_corpora(calls)
    ask = AskInput(
        args["question"],
        debug=False,
        session=_session_of(calls, args["session"]) if "session" in args else None,
        archives=archives or None,
        corpora=corpora or None,
        # nothing this caller may search: the model answers alone
        no_rag=True if not corpora and not archives and not calls.owner else None,
    )
    out = (await AnswerClient(calls).ask(ask)).output
    doc = {
        "answer": out.get("answer"),
        "mode": out.get("mode"),
        "citations": out.get("citations", []),
        "sources": out.get("sources", []),
        "session": args.get("session"),
    }
    text = str(out.get("answer") or "")
    sources = _sources_text(out)
    if sources:
        nearest = out.get("mode") == "abstained"
        text += ("\n\nNearest passages (not an answer):\n" if nearest else "\n\nSources:\n") + sources
    return text, doc


TOOLS: Final[dict[str, Tool]] = {
    t.name: t
    for t in (
        Tool(
            name="search_archives",
            title="Search document archives",
            description=(
                "Search the user's document archives for relevant content. Use this tool when the user asks "
                "about documents, policies, reports, maintenance records, or any information that might be "
                "in their archives. Answers passages as '[n] Archiv: <name> (Ebene: …, Seite: …, "
                "Abschnitt: …)' separated by '---'."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY,
                        "description": "Search query: rephrase the user's question for semantic search.",
                    },
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 20,
                        "description": "Number of results (default RAG_DEFAULT_TOP_K, 5).",
                    },
                    "rag_config": _RAG_CONFIG,
                    "format": {"type": "string", "enum": ["text", "json"], "default": "text"},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            run=_search_archives,
        ),
        Tool(
            name="rag_query",
            title="Search corpora",
            description=(
                "Search one corpus (corpus) or several (corpora) of the community's documents for "
                "passages similar to the query; each corpus answers its own ranking with scores, "
                "text and metadata (file, page, chunk id)."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY},
                    "corpus": _CORPUS,
                    "corpora": {"type": "array", "items": _CORPUS, "minItems": 1, "maxItems": 64},
                    "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                    "filter": {
                        "type": "object",
                        "description": 'Metadata filter, e.g. {"page": 3} or {"doc_cid": "blake3:…"}.',
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            run=_rag_query,
        ),
        Tool(
            name="list_corpora",
            title="List corpora",
            description=(
                "List the corpora of the mesh's connected nodes: documents, chunks, size, model, host."
            ),
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            run=_list_corpora,
        ),
        Tool(
            name="ask",
            title="Ask the documents",
            description=(
                "Answer a question from the community's documents, with citations [file#chunk] checked "
                "against the passages used and the sources listed. Name corpora to search only those, "
                "rag_config to search archives, and a session to continue a conversation."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY},
                    "corpora": {"type": "array", "items": _CORPUS, "minItems": 1, "maxItems": 64},
                    "session": {"type": "string", "pattern": SESSION_PATTERN},
                    "rag_config": _RAG_CONFIG,
                },
                "required": ["question"],
                "additionalProperties": False,
            },
            run=_ask,
        ),
    )
}
"""Every tool by name."""

_VALIDATORS: Final = {name: jsonschema.Draft202012Validator(t.input_schema) for name, t in TOOLS.items()}


def check_arguments(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` if they satisfy the tool's schema, else ``bad_request`` naming the field."""
    error = jsonschema.exceptions.best_match(_VALIDATORS[name].iter_errors(dict(arguments)))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise BadRequest(f"{where}: {error.message[:300]}")
    return dict(arguments)


async def run_tool(
    calls: Calls, name: str, arguments: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """Run tool ``name``; a ``BusError`` (unknown tool, bad arguments, a failed call) is raised as
    :class:`ToolError`."""
    try:
        tool = TOOLS.get(name)
        if tool is None:
            raise NotFound(f"no tool {name[:64]!r}: the tools are {', '.join(TOOLS)}")
        return await tool.run(calls, check_arguments(name, arguments or {}))
    except BusError as exc:
        raise ToolError(exc) from exc
