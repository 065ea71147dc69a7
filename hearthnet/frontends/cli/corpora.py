"""Commands about corpora anywhere in the mesh: ``query``, ``corpora``, ``docs``, ``delete`` and
``rag reindex``; where a corpus lives is asked with :mod:`hearthnet.frontends.client.corpora`."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import anyio

from hearthnet.bus.context import CallResult
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rag import MAX_K, QUERY_MODES, RagClient, host_label
from hearthnet.errors import BadRequest, BusError, NotFound, Partition
from hearthnet.frontends.cli.args import corpus_arg, load_json, stdin_text, text_arg
from hearthnet.frontends.cli.docs_set import add_docs_set, metadata_text, resolve_document
from hearthnet.frontends.cli.hits import hit_lines, hits_table, query_corpora
from hearthnet.frontends.cli.output import (
    CliError,
    Progress,
    emit_text,
    node_label,
    one_line,
    plural,
    shown,
    warn,
)
from hearthnet.frontends.client.client import AsyncClient, Client
from hearthnet.frontends.client.corpora import (
    explain_unreachable,
    hosted_here_or_there,
    known_hosts,
    list_corpora_of,
    not_held_by,
    rag_hosts,
    seen_text,
    since_text,
)
from hearthnet.frontends.client.search import checked_corpora

__all__ = ["add_corpora", "add_delete", "add_docs", "add_query", "add_rag"]

LIST_PAGE = 1000
"""Documents asked for per ``rag.list_documents`` call by ``hearthnet docs``."""
REINDEX_TIMEOUT = 3600.0
"""Seconds ``hearthnet rag reindex`` waits for the whole corpus to be re-embedded."""


# -- query, corpora, rag reindex -----------------------------------------------------------
MAX_STDIN_QUERY = 64 * 1024
"""Most bytes ``query -`` reads from stdin (the node takes queries of at most 8,192 characters)."""


def cmd_query(args: argparse.Namespace) -> None:
    if not 1 <= args.k <= MAX_K:
        raise BadRequest(f"-k must be between 1 and {MAX_K}")
    corpora = checked_corpora([corpus_arg(c) for c in args.corpus])
    # '-': the question from stdin (a long one, or one with quotes the shell would eat)
    text = stdin_text("the query", MAX_STDIN_QUERY) if args.text == "-" else args.text
    query = text_arg(text, "the query")
    filter = load_json(args.filter, "--filter") if args.filter else None
    client = Client(args.home)
    if len(corpora) > 1:  # several corpora (or archives): one merged ranking
        query_corpora(args, corpora, query, filter, _node_names(client))
        return
    (corpus,) = corpora
    try:
        result = client.run(
            lambda c: RagClient(c).query(corpus, query, k=args.k, filter=filter, mode=args.mode or None)
        )
    except (NotFound, Partition) as exc:
        raise anyio.run(explain_unreachable, AsyncClient(args.home), corpus, exc) from None
    chunks = result.output["chunks"]
    lines = hit_lines(chunks)
    warn(args, list(result.meta.get("warnings") or []))
    document = {"chunks": chunks, "meta": result.meta, "provider": result.provider}
    if args.table:
        emit_text(args, document, hits_table(chunks))
        return
    emit_text(args, document, "\n".join(lines) if lines else "(no matches)")


def cmd_corpora(args: argparse.Namespace) -> None:
    client = Client(args.home)
    nodes = rag_hosts(client.run(lambda c: NodeClient(c).status()))
    corpora: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    answers = anyio.run(lambda: list_corpora_of(AsyncClient(args.home), nodes, timeout=LIST_TIMEOUT))
    for node, answer in answers:
        if isinstance(answer, BusError):
            errors.append({"node": node, "error": answer.code, "message": answer.message})
        else:
            corpora.extend({**c, "node": node} for c in answer)
    _add_known(client, corpora)
    names = _node_names(client)
    for c in corpora:
        c.setdefault("node_name", names.get(str(c["node"]), ""))
    lines = [_corpus_line(c, names) for c in corpora]
    if not args.json:
        for e in errors:  # on stderr: stdout stays the list
            print(f"hearthnet: {e['node']}: {e['error']}: {shown(e['message'])}", file=sys.stderr)
    emit_text(
        args,
        {"corpora": corpora, "errors": errors},
        "\n".join(lines) if lines else "(no corpora in the mesh)",
    )
    if nodes and len(errors) == len(nodes):
        raise CliError(f"none of the {len(nodes)} nodes running rag answered rag.list_corpora")


def _add_known(client: Client, corpora: list[dict[str, Any]]) -> None:
    """Add the corpora of offline hosts (from the event log) and flag names hosted twice."""
    try:
        known = client.run(lambda c: RagClient(c).known_corpora())
    except NotFound:
        return  # a node without the catalog (an older version)
    listed = {(c["name"], c["node"]) for c in corpora}
    for entry in known:
        for h in entry["hosts"]:  # a replica: whose copy it holds, and how far behind
            if h.get("role") == "replica":
                for c in corpora:
                    if (c["name"], c["node"]) == (entry["name"], h["node"]):
                        c.update(replica_of=h.get("replica_of"), behind=h.get("behind", 0))
        hosts = [h for h in entry["hosts"] if h["hosting"]]
        for h in hosts:
            if (entry["name"], h["node"]) in listed or h["online"]:
                continue  # listed by its host; or online but it did not answer (reported on stderr)
            corpora.append(
                {
                    "name": entry["name"],
                    "docs": h["docs"],
                    "chunks": h["chunks"],
                    "size_bytes": None,  # only its host can say: these are from the event log
                    "language_majority": None,
                    "embedding_model": None,
                    "node": h["node"],
                    "node_name": h.get("node_name") or "",
                    "offline": True,
                    "last_seen": h.get("last_seen"),
                    "seen": seen_text(h),
                }
            )
        if len(hosts) > 1:  # one name, several copies: which one queries go to, the others flagged
            order = [h["node"] for h in hosts]
            preferred = next((h["node"] for h in hosts if h["serving"]), order[0])
            for c in corpora:
                if c["name"] == entry["name"] and c["node"] in order:
                    c["hosts"] = order
                    if c["node"] != preferred:
                        c["duplicate_of"] = preferred
    corpora.sort(key=lambda c: (c["name"], c["node"] != c.get("duplicate_of", c["node"]), c["node"]))


def _count(value: Any) -> str:
    return "?" if value is None else str(value)


def _archive_line(c: dict[str, Any], node: str) -> str:
    """An archive: read-only, its label, collection, count and dimension, and whether it answers."""
    model = shown(str(c.get("embedding_model") or "-"))
    dim = f"{c['dim']}-d" if c.get("dim") else "?-d"
    line = (
        f"{c['name']:20} {_count(c.get('docs')):>5} docs {_count(c.get('chunks')):>7} chunks  "
        f"{model} {dim}  {node}  (ARCHIVE, read-only: {shown(str(c.get('label') or c['name']))}, "
        f"collection {shown(str(c.get('collection_name') or '?'))}, layer {c.get('layer') or '?'})"
    )
    error = c.get("error")
    if isinstance(error, dict):
        line += f"  (UNREACHABLE: {error.get('error')}: {shown(one_line(str(error.get('message'))))})"
    return line


def _corpus_line(c: dict[str, Any], names: dict[str, str]) -> str:
    """One corpus of ``hearthnet corpora``: counts, language, model, and its node by name and short id."""

    def node(node_id: str) -> str:
        return node_label(
            node_id, names.get(node_id) or (c.get("node_name") if node_id == c["node"] else None)
        )

    if c.get("read_only"):
        return _archive_line(c, node(str(c["node"])))
    model = shown(str(c.get("embedding_model") or "-"))
    line = (
        f"{c['name']:20} {plural(int(c['docs']), 'doc'):>10} {plural(int(c['chunks']), 'chunk'):>13}  "
        f"{c.get('language_majority') or '-':4} {model}  {node(str(c['node']))}"
    )
    if c.get("offline"):
        last = c.get("last_seen")
        when = since_text(float(last)) if isinstance(last, int | float) else ""
        line += f"  (OFFLINE since {when})" if when else "  (OFFLINE: not seen since this node started)"
    elif not c.get("served", True):
        line += "  (not served: embedded with another model; rag reindex)"
    if c.get("replica_of"):
        behind = int(c.get("behind") or 0)
        lag = "up to date" if not behind else f"{plural(behind, 'document')} behind"
        line += f"  (REPLICA of {node(str(c['replica_of']))}: {lag})"
    if "duplicate_of" in c:
        line += f"  (DUPLICATE name: queries go to the copy on {node(str(c['duplicate_of']))})"
    elif c.get("hosts"):
        others = [node(str(n)) for n in c["hosts"] if n != c["node"]]
        line += f"  (name also used on {', '.join(others)}: queries go here)"
    return line


LIST_TIMEOUT = 10.0
"""Seconds each node has to answer ``rag.list_corpora`` for ``hearthnet corpora``."""


def cmd_rag_reindex(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    client = Client(args.home)
    try:
        progress = Progress(not args.json)
        try:
            result = client.run(
                lambda c: RagClient(c).reindex(
                    corpus, timeout=REINDEX_TIMEOUT, on_frame=lambda f: progress.show(corpus, f)
                )
            )
        finally:
            progress.done()
    except NotFound:
        own = client.run(lambda c: NodeClient(c).status())["node_id"]
        hosts = [h for h in anyio.run(known_hosts, AsyncClient(args.home), corpus) if h["node"] != own]
        if not hosts:
            raise
        where = " and ".join(shown(host_label(h["node"], h.get("node_name"))) for h in hosts)
        raise NotFound(
            f"corpus {corpus} is not on this node: it is hosted on {where}: "
            f"run 'hearthnet rag reindex --corpus {corpus}' there"
        ) from None
    emit_text(
        args,
        result.output,
        f"reindexed {plural(int(result.output['docs']), 'document')} of {corpus} "
        f"with {result.output['embedding_model']}",
    )


# -- docs ---------------------------------------------------------------------------------
def cmd_docs(args: argparse.Namespace) -> None:
    if args.corpus is None:
        raise BadRequest("the following arguments are required: --corpus")
    corpus = corpus_arg(args.corpus)
    client = Client(args.home)
    docs: list[dict[str, Any]] = []
    after = ""
    provider: str | None = args.on
    warnings: list[str] = []
    total = 0
    try:
        while True:  # pages by doc_cid; the first answer's provider answers the rest
            result = client.run(
                lambda c: RagClient(c).list_documents(corpus, after=after, limit=LIST_PAGE, provider=provider)  # noqa: B023 (run at once)
            )
            provider = result.provider
            warnings = list(result.meta.get("warnings") or warnings)
            docs.extend(result.output["documents"])
            total = int(result.output["total"])
            after = result.output.get("next") or ""
            if not after:
                break
    except (NotFound, Partition) as exc:
        if args.on:  # the node named may simply not hold it: say so, and who does
            raise anyio.run(not_held_by, AsyncClient(args.home), corpus, args.on, exc) from None
        raise anyio.run(explain_unreachable, AsyncClient(args.home), corpus, exc) from None
    names = _node_names(client)
    lines = []
    for d in sorted(docs, key=lambda d: (str(d["title"]).lower(), d["doc_cid"])):
        by = d.get("ingested_by")
        when = d.get("ingested_at")
        facts = [
            str(d.get("filename") or "-"),
            "? pages" if d.get("pages") is None else plural(int(d["pages"]), "page"),
            "? chunks" if d.get("chunks") is None else plural(int(d["chunks"]), "chunk"),
            str(d.get("language") or "und"),
            f"by {host_label(by, names.get(by))}" if by else "by ?",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if isinstance(when, int | float) else "",
        ]
        lines.append(shown(str(d["title"])))
        lines.append("    " + shown(" | ".join(f for f in facts if f)))
        lines.append(f"    {d['doc_cid']}")
        if d.get("source_path"):  # a watched folder's file
            lines.append(f"    from {shown(str(d['source_path']))}")
        fields = metadata_text(d.get("metadata") or {})
        if fields:  # what ingest --meta and docs set gave it, shown as docs set shows it
            lines.append("    " + shown(fields))
    where = host_label(str(provider), names.get(str(provider)))
    lines.append(f"{plural(total, 'document')} in {corpus} on {shown(where)}")
    warn(args, warnings)
    emit_text(
        args,
        {"corpus": corpus, "node": provider, "total": total, "documents": docs, "warnings": warnings},
        "\n".join(lines),
    )


def _node_names(client: Client) -> dict[str, str]:
    """Names of this node and its connected peers, by id (for "ingested by")."""
    status = client.run(lambda c: NodeClient(c).status())
    names = {str(p["node_id"]): str(p.get("name") or "") for p in status.get("peers", [])}
    names[str(status["node_id"])] = str(status.get("name") or "")
    return {k: v for k, v in names.items() if v}


# -- delete -------------------------------------------------------------------------------
def cmd_delete(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    if not args.doc_cid.strip():
        raise BadRequest("DOC is empty: give the document's id, file name or title ('hearthnet docs')")
    last: BusError | None = None
    for node in anyio.run(hosted_here_or_there, AsyncClient(args.home), corpus, args.on):
        try:
            result = anyio.run(_delete, AsyncClient(args.home), corpus, args.doc_cid, node)
        except NotFound as exc:  # with two hosts of one name, the document is on one of them
            last = last or exc
            continue
        out = {
            "corpus": corpus,
            "node": result.provider,
            **result.output,
            "delete_event_id": result.meta.get("delete_event_id"),
            "already_deleted": bool(result.meta.get("already_deleted")),
        }
        note = " (it was gone already; its deletion is announced now)" if out["already_deleted"] else ""
        said = (
            f"deleted {out['doc_cid']} from {corpus} on {result.provider}: "
            f"{plural(int(out['chunks_removed']), 'chunk')} removed{note}"
        )
        if out.get("source_path"):
            said += (
                f"\nnote  it came from the watched file {shown(str(out['source_path']))}: its folder's "
                "watcher indexes it again after its node's next start; move the file out of the folder "
                "or list it in .hearthnetignore to keep it out"
            )
        emit_text(args, out, said)
        return
    assert last is not None
    if args.on:
        raise anyio.run(not_held_by, AsyncClient(args.home), corpus, args.on, last)
    raise last


async def _delete(client: AsyncClient, corpus: str, doc: str, node: str) -> CallResult:
    doc_cid = await resolve_document(client, corpus, doc, node)
    return await RagClient(client).delete(corpus, doc_cid, provider=node, timeout=300)


def add_query(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("query", parents=[common], help="search a corpus anywhere in the mesh")
    p.add_argument("text", help="the question; '-' reads it from stdin")
    p.add_argument(
        "--corpus",
        required=True,
        action="append",
        help="corpus (or archive) to search; repeat it to search several at once, merged into one "
        "ranking (required)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="show a table: subject, timestamp and snippet (from the chunks' metadata; "
        "default: off, one passage per line)",
    )
    p.add_argument(
        "-k",
        type=int,
        default=5,
        metavar="N",
        help=f"number of chunks to return, 1-{MAX_K} (default: %(default)s)",
    )
    p.add_argument(
        "--filter",
        metavar="JSON",
        help='JSON metadata conditions, e.g. {"page": {"$gte": 3}} (default: none)',
    )
    p.add_argument(
        "--mode",
        choices=QUERY_MODES,
        help="rank by meaning (dense), by exact words (keyword) or by both (hybrid; the default)",
    )
    p.set_defaults(func=cmd_query)


def add_corpora(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("corpora", parents=[common], help="every corpus reachable in the mesh, with its node")
    p.set_defaults(func=cmd_corpora)


def add_docs(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "docs",
        parents=[common],
        help="the documents of a corpus (title, file, pages, chunks, who, when); 'docs set' changes one",
    )
    p.add_argument("--corpus", help="the corpus to list (no default: required, also before 'set')")
    p.add_argument(
        "--on", metavar="NODE_ID", help="ask this host (default: the corpus's host, the largest copy first)"
    )
    p.set_defaults(func=cmd_docs)
    add_docs_set(p, common)


def add_delete(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "delete", parents=[common], help="delete a document from a corpus, on its host (trusted members)"
    )
    p.add_argument(
        "doc_cid",
        metavar="DOC",
        help="the document: its id, file name or title ('hearthnet docs' lists them)",
    )
    p.add_argument("--corpus", required=True, help="the corpus it is in (required)")
    p.add_argument(
        "--on", metavar="NODE_ID", help="the host to delete it on (default: the corpus's host that has it)"
    )
    p.set_defaults(func=cmd_delete)


def add_rag(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("rag", parents=[common], help="RAG maintenance")
    rsub = p.add_subparsers(dest="rag_command", required=True, metavar="ACTION")
    rr = rsub.add_parser(
        "reindex", parents=[common], help="re-embed a corpus from its blobs with this node's model"
    )
    rr.add_argument("--corpus", required=True, help="corpus on this node to re-embed (required)")
    rr.set_defaults(func=cmd_rag_reindex)
