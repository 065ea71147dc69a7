"""How ``hearthnet query`` shows hits: one line per chunk with its source, or ``--table`` (subject,
timestamp and snippet columns from the chunks' metadata); and the search of several corpora at
once (:func:`hearthnet.frontends.client.search.search_corpora`)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from hearthnet.contracts.formats import place_of
from hearthnet.frontends.cli.output import CliError, emit_text, shown
from hearthnet.frontends.client.client import AsyncClient
from hearthnet.frontends.client.search import search_corpora

__all__ = ["SNIPPET", "SUBJECT_KEYS", "TIMESTAMP_KEYS", "hit_lines", "hits_table", "query_corpora"]

SUBJECT_KEYS = ("subject", "title", "doc_title", "doc_filename", "filename", "section_heading", "document_id")
"""Where ``--table`` finds a chunk's subject: the first of these its metadata has."""
TIMESTAMP_KEYS = ("timestamp", "date", "datetime", "created_at", "created", "updated_at", "modified")
"""Where ``--table`` finds a chunk's time: the first of these its metadata has."""
SNIPPET = 160
"""Characters of a chunk's text a hit line shows."""


def _first(md: Mapping[str, Any], keys: Sequence[str]) -> str:
    for key in keys:
        value = md.get(key)
        if value is not None and not isinstance(value, bool) and str(value).strip():
            return " ".join(str(value).split())
    return ""


def _source(md: Mapping[str, Any]) -> str:
    """Where a chunk comes from: its file (and title when it differs), page and section."""
    source = _first(md, ("doc_filename", "doc_title", "title", "filename", "document_id")) or "?"
    place = place_of(md) if md.get("unit") else None  # a section, slide, sheet or message
    where = f"{source}, {shown(place)}" if place else f"{source} p.{md.get('page', '?')}"
    title = md.get("doc_title")
    if md.get("doc_filename") and title and title != Path(str(source)).stem:
        where += f"  ({title})"
    if md.get("section_heading"):
        where += f"  § {' '.join(str(md['section_heading']).split())}"
    return where


def _snippet(text: Any, width: int = SNIPPET) -> str:
    return " ".join(str(text or "").split())[:width]


def hit_lines(chunks: Sequence[Mapping[str, Any]], names: Mapping[str, str] | None = None) -> list[str]:
    """Two lines per hit: rank, score, source (and ``[corpus @ node]`` for a merged search), snippet."""
    lines = []
    for c in chunks:
        md = c["metadata"]
        origin = ""
        if "corpus" in c:
            node = str(c.get("node") or "?")
            origin = f"[{c['corpus']} @ {(names or {}).get(node) or node}]  "
        head = f"{c['rank']:>2}. {c['score']:.3f}  {shown(origin + _source(md))}"
        lines.append(f"{head}\n    {shown(_snippet(c.get('text')))}")
    return lines


def hits_table(chunks: Sequence[Mapping[str, Any]], *, width: int | None = None) -> str:
    """``--table``: rank, score, (corpus), subject, timestamp and snippet; ``-`` where a chunk's
    metadata has none, the snippet filling the terminal's width."""
    if not chunks:
        return "(no matches)"
    total = width or shutil.get_terminal_size((120, 24)).columns
    multi = any("corpus" in c for c in chunks)
    rows: list[list[str]] = []
    texts: list[Any] = []
    for c in chunks:
        md = c["metadata"]
        row = [str(c["rank"]), f"{c['score']:.3f}"]
        if multi:
            row.append(str(c.get("corpus") or ""))
        row += [_first(md, SUBJECT_KEYS) or "-", _first(md, TIMESTAMP_KEYS) or "-"]
        rows.append([shown(v) for v in row])
        texts.append(c.get("text"))
    head = ["#", "score", *(["corpus"] if multi else []), "subject", "timestamp", "snippet"]
    caps = [3, 6, *([20] if multi else []), 32, 25]
    widths = [min(cap, max(len(head[i]), *(len(r[i]) for r in rows))) for i, cap in enumerate(caps)]
    room = max(20, total - sum(widths) - 2 * len(widths))

    def cell(value: str, w: int) -> str:
        return value if len(value) <= w else value[: w - 1] + "…"

    out = ["  ".join(cell(h, w).ljust(w) for h, w in zip(head, widths, strict=False)) + "  snippet"]
    for r, text in zip(rows, texts, strict=True):
        fixed = "  ".join(cell(v, w).ljust(w) for v, w in zip(r, widths, strict=True))
        out.append(f"{fixed}  {shown(_snippet(text, room))}")
    return "\n".join(out)


def query_corpora(
    args: argparse.Namespace,
    corpora: Sequence[str],
    query: str,
    filter: Mapping[str, Any] | None,
    names: Mapping[str, str],
) -> None:
    """``hearthnet query`` with several ``--corpus``: one merged ranking (each corpus asked with
    ``-k``, ``--filter`` and ``--mode`` as one would be); failed corpora named on stderr (and in
    ``--json``); exit 1 only if none answered, the one line naming every failure."""
    outcome = anyio.run(
        lambda: search_corpora(
            AsyncClient(args.home), corpora, query, k=args.k, filter=filter, mode=args.mode
        )
    )
    chunks = [
        {
            "rank": rank,
            "score": round(r.hit.score, 6),
            "fused": round(r.fused, 6),
            "corpus": r.hit.corpus,
            "node": r.hit.node,
            "text": r.hit.text,
            "metadata": dict(r.hit.metadata),
        }
        for rank, r in enumerate(outcome.results, start=1)
    ]
    failed = [
        f"{c.corpus}: {c.error.code}: {shown(c.error.message)}"
        for c in outcome.corpora
        if c.error is not None
    ]
    if not args.json:
        for c in outcome.corpora:
            for w in c.warnings:
                print(f"hearthnet: warning: {c.corpus}: {shown(w)}", file=sys.stderr)
        if outcome.answered:  # else the one line of the failure names them all
            for line in failed:
                print(f"hearthnet: corpus {line}", file=sys.stderr)
    document = {
        "chunks": chunks,
        "merge": outcome.merge,
        "corpora": [c.to_json() for c in outcome.corpora],
    }
    if args.table:
        text = hits_table(chunks)
    else:
        lines = hit_lines(chunks, names)
        text = "\n".join(lines) if lines else "(no matches)"
        if chunks:
            text += f"\n(merged by {'score' if outcome.merge == 'score' else 'reciprocal rank fusion'})"
    emit_text(args, document, text)
    if not outcome.answered:
        raise CliError(f"none of the {len(outcome.corpora)} corpora answered: {'; '.join(failed)}")
