"""``hearthnet docs set DOC --corpus C --meta K=V --title T --filename F``: a document's title,
file name and metadata changed on the corpus's host (``rag.update``), without re-embedding it;
replicas follow its signed ``rag.document.updated``.  ``DOC`` is the document's id, or its file
name or title as ``hearthnet docs`` lists them."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from hearthnet.bus.context import CallResult
from hearthnet.contracts.folders import SOURCE_PATH
from hearthnet.contracts.rag import RagClient
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.frontends.cli.args import corpus_arg, meta_args
from hearthnet.frontends.cli.output import emit_text, shown
from hearthnet.frontends.client.client import AsyncClient
from hearthnet.frontends.client.corpora import hosted_here_or_there, not_held_by

__all__ = ["add_docs_set", "metadata_text", "resolve_document"]

UPDATE_TIMEOUT = 300.0
"""Seconds ``docs set`` waits for the host (every chunk's metadata is rewritten: a large book takes
seconds on a busy small device)."""


async def resolve_document(client: AsyncClient, corpus: str, doc: str, node: str) -> str:
    """``doc`` as a document id: itself if it is one, else the one document of ``corpus`` on ``node``
    whose file name or title it is (``bad_request`` naming the candidates when several are)."""
    if doc.startswith("blake3:"):
        return doc
    rag, after, found = RagClient(client), "", []
    while True:
        page = await rag.list_documents(corpus, after=after, limit=1000, provider=node, timeout=30)
        found += [d for d in page.output["documents"] if doc in (d.get("filename"), d.get("title"))]
        after = page.output.get("next") or ""
        if not after:
            break
    if not found:
        raise NotFound(
            f"no document of corpus {corpus} on {node} has the file name or title {doc!r}: "
            f"'hearthnet docs --corpus {corpus}' lists them with their ids"
        )
    if len(found) > 1:
        ids = ", ".join(str(d["doc_cid"]) for d in found[:5])
        raise BadRequest(f"{len(found)} documents of corpus {corpus} are named {doc!r}: give its id ({ids})")
    return str(found[0]["doc_cid"])


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = dict(meta_args(args.meta))
    for key in args.unset or ():
        if key in fields:
            raise BadRequest(f"--meta {key} and --unset {key} are both given")
        fields[key] = None
    if not fields and args.title is None and args.filename is None:
        raise BadRequest(
            "nothing to change: give --meta KEY=VALUE, --unset KEY, --title TITLE or --filename NAME"
        )
    return fields


def cmd_docs_set(args: argparse.Namespace) -> None:
    if getattr(args, "corpus", None) is None:
        raise BadRequest("docs set needs --corpus: the corpus the document is in")
    corpus = corpus_arg(args.corpus)
    fields = _fields(args)
    if args.title is not None and not args.title.strip():
        raise BadRequest("--title is empty")
    if args.filename is not None and not args.filename.strip():
        raise BadRequest("--filename is empty")
    last: BusError | None = None
    on = getattr(args, "on", None)
    for node in anyio.run(hosted_here_or_there, AsyncClient(args.home), corpus, on):
        try:
            result = anyio.run(
                _update, AsyncClient(args.home), corpus, args.doc, node, fields, (args.title, args.filename)
            )
        except NotFound as exc:  # with two hosts of one name, the document is on one of them
            last = last or exc
            continue
        out = {"corpus": corpus, "node": result.provider, **result.output}
        out["update_event_id"] = result.meta.get("update_event_id") or None
        emit_text(args, out, _said(out))
        return
    assert last is not None
    if on:
        raise anyio.run(not_held_by, AsyncClient(args.home), corpus, on, last)
    raise last


async def _update(
    client: AsyncClient,
    corpus: str,
    doc: str,
    node: str,
    fields: dict[str, Any],
    names: tuple[str | None, str | None],
) -> CallResult:
    """``names``: the new title and file name (``None``: kept)."""
    doc_cid = await resolve_document(client, corpus, doc, node)
    title, filename = names
    return await RagClient(client).update(
        corpus, doc_cid, meta=fields, title=title, filename=filename, provider=node, timeout=UPDATE_TIMEOUT
    )


def metadata_text(metadata: dict[str, Any]) -> str:
    """A document's metadata fields on one line, ``k='text', n=7`` by key; not its watched file's
    ``source_path`` (shown as "from")."""
    fields = sorted((k, v) for k, v in metadata.items() if k != SOURCE_PATH)
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in fields)


def _said(out: dict[str, Any]) -> str:
    meta = metadata_text(out["metadata"])
    named = f"; file {shown(repr(out['filename']))}" if out.get("filename") else ""
    if out["metadata"].get(SOURCE_PATH):
        named += f" from {shown(str(out['metadata'][SOURCE_PATH]))}"
    now = f"title {shown(repr(out['title']))}{named}; metadata {shown(meta) if meta else '(none)'}"
    if not out["changed"]:
        return f"nothing changed: {out['doc_cid']} in {out['corpus']} already has {now}"
    return f"updated {out['doc_cid']} in {out['corpus']} on {out['node']}: {now} (not re-embedded)"


def add_docs_set(docs: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``docs set`` under ``docs`` (whose own ``--corpus`` may come before it)."""
    sub = docs.add_subparsers(dest="docs_command", metavar="ACTION")
    p = sub.add_parser(
        "set",
        parents=[common],
        help="change a document's metadata and title, without re-embedding it (trusted members)",
    )
    p.add_argument("doc", metavar="DOC", help="the document: its id, file name or title ('hearthnet docs')")
    p.add_argument("--corpus", default=argparse.SUPPRESS, help="the corpus it is in (required)")
    p.add_argument(
        "--meta",
        action="append",
        metavar="KEY=VALUE",
        help="a field to set, repeatable, typed as on ingest (KEY:date=2024-03-12, KEY:int=7; default: none)",
    )
    p.add_argument(
        "--unset", action="append", metavar="KEY", help="a field to remove (repeatable; default: none)"
    )
    p.add_argument("--title", help="the document's new title (default: kept)")
    p.add_argument(
        "--filename",
        metavar="NAME",
        help="the file name its citations name, e.g. after renaming the file (default: kept)",
    )
    p.add_argument(
        "--on",
        metavar="NODE_ID",
        default=argparse.SUPPRESS,
        help="the host to change it on (default: the corpus's host)",
    )
    p.set_defaults(func=cmd_docs_set)
