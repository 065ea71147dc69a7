"""``/files/<cid>/view?corpus=C``: a document the browser cannot open itself (Word, slides, sheets,
e-books, web pages, e-mail, TIFF and HEIC scans) as an HTML rendering of its indexed text, with an
anchor at each place a citation names, so the UI opens it there (``#u3-2``: unit 3, paragraph or
row 2; :func:`hearthnet.contracts.formats.anchor_of`).

The text is the document's chunks from ``rag.get`` (filtered by ``doc_cid``), laid back onto
each unit at their ``char_start``: chunks cover every non-space character of a unit, so the
rendering is the indexed text itself.  A unit is a section under its heading path, a slide, a
sheet, a message or a page.  Every text passes through :func:`html.escape`; the page has no script.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from hearthnet.blobs.cid import is_cid
from hearthnet.contracts.formats import anchor_of, place_of
from hearthnet.contracts.rag import MAX_GET_CHUNKS, RagClient, validate_corpus_name
from hearthnet.errors import BadRequest, NotFound
from hearthnet.frontends.http.app import UiState, api
from hearthnet.frontends.http.tokens import Session

__all__ = ["render", "routes"]

MAX_CHUNKS = 50_000
"""Chunks of one document laid out (a 5,000-page book has ~20,000)."""


async def _view(state: UiState, request: Request, session: Session) -> Response:
    cid = request.path_params["cid"]
    if not is_cid(cid):
        raise BadRequest("not a document id (blake3:<hex>)")
    corpus = validate_corpus_name(request.query_params.get("corpus") or "")
    rag = RagClient(state.bus.login(session.level))
    chunks: list[Mapping[str, Any]] = []
    while len(chunks) < MAX_CHUNKS:
        page = await rag.get(corpus, filter={"doc_cid": cid}, limit=MAX_GET_CHUNKS, offset=len(chunks))
        chunks.extend(page)
        if len(page) < MAX_GET_CHUNKS:
            break
    if not chunks:
        raise NotFound(f"corpus {corpus} holds no document {cid}")
    return HTMLResponse(render(chunks), headers={"cache-control": "private, max-age=300"})


def _unit_text(chunks: Iterable[Mapping[str, Any]]) -> str:
    """A unit's text from its chunks: each at its ``char_start``, the gaps (spaces) as spaces."""
    spans = sorted((int(c["metadata"].get("char_start", 0)), str(c.get("text") or "")) for c in chunks)
    out: list[str] = []
    end = 0
    for start, text in spans:
        if start > end:
            out.append(" " * (start - end))
            end = start
        if start + len(text) > end:
            out.append(text[end - start :])
            end = start + len(text)
    return "".join(out)


def _marks(chunks: Iterable[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """``(offset, anchor)`` of each paragraph or row of a unit that a chunk is cited by."""
    starts: dict[str, int] = {}
    for c in chunks:
        anchor = anchor_of(c["metadata"])
        start = c["metadata"].get("mark_start")
        if anchor and "-" in anchor and isinstance(start, int):
            starts[anchor] = start
    return sorted((offset, anchor) for anchor, offset in starts.items())


def _unit_html(page: int, chunks: list[Mapping[str, Any]]) -> str:
    meta = chunks[0]["metadata"]
    heading = place_of({k: v for k, v in meta.items() if k not in ("paragraph", "row")}) or f"page {page}"
    text = _unit_text(chunks)
    marks = _marks(chunks)
    parts = [escape(text[: marks[0][0]] if marks else text)]
    for i, (offset, anchor) in enumerate(marks):  # each paragraph or row a span the anchor names
        end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        parts.append(f'<span class="mark" id="{escape(anchor)}">{escape(text[offset:end])}</span>')
    unit = anchor_of({**meta, "paragraph": None, "row": None}) or f"page={page}"
    body = "".join(parts)
    return f'<section id="{escape(unit)}"><h2>{escape(heading)}</h2><div class="text">{body}</div></section>'


def render(chunks: list[Mapping[str, Any]]) -> str:
    """The document's page: its title, then each unit with its anchors."""
    units: dict[int, list[Mapping[str, Any]]] = {}
    for c in chunks:
        units.setdefault(int(c["metadata"].get("page") or 0), []).append(c)
    meta = chunks[0]["metadata"]
    title = str(meta.get("doc_title") or meta.get("doc_filename") or meta.get("doc_cid") or "")
    body = "".join(_unit_html(page, units[page]) for page in sorted(units))
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · HearthNet</title>"
        '<link rel="stylesheet" href="/static/app.css"></head>'
        f'<body class="document-view"><main id="main"><h1>{escape(title)}</h1>{body}</main></body></html>\n'
    )


def routes(state: UiState) -> list[BaseRoute]:
    return [Route("/files/{cid}/view", api(state, _view))]
