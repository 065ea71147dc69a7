"""CLI commands for a corpus's documents (``docs``, ``delete``) and what the document commands share:
where a corpus lives (``rag.known_corpora``), and what to tell a user when it cannot be reached.

Light on purpose (the CLI starts fast): only the client, errors and corpus names are imported.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hearthnet.client import Client
from hearthnet.errors import BadRequest, BusError, NotFound, Partition
from hearthnet.frontends.placement import seen_text
from hearthnet.services.rag.names import host_label, validate_corpus_name

__all__ = [
    "cmd_delete",
    "cmd_docs",
    "corpus_arg",
    "explain_unreachable",
    "hosted_here_or_there",
    "known_hosts",
    "plural",
    "seen_text",
    "warn",
]

LIST_PAGE = 1000
"""Documents asked for per ``rag.list_documents`` call by ``hearthnet docs``."""


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def warn(args: argparse.Namespace, warnings: list[str]) -> None:
    """A node's warnings (meta ``warnings``) on stderr; with ``--json`` they are in the document."""
    if args.json:
        return
    from hearthnet.cli_data import shown

    for text in warnings:
        print(f"hearthnet: warning: {shown(str(text))}", file=sys.stderr)


def corpus_arg(name: str) -> str:
    """``--corpus`` checked before any node is asked; a name that only differs by case gets a hint."""
    try:
        return validate_corpus_name(name)
    except BadRequest as exc:
        lowered = name.lower()
        try:
            hint = f"; did you mean {validate_corpus_name(lowered)!r}?" if lowered != name else ""
        except BadRequest:
            hint = ""
        raise BadRequest(f"{exc.message}{hint}") from None


def known_hosts(client: Client, corpus: str) -> list[dict[str, Any]]:
    """The hosts of ``corpus`` this node knows of (``rag.known_corpora``), preferred first; those
    online and no longer serving it are left out.  Empty if none, or if the node cannot tell."""
    try:
        answer = client.call("rag.known_corpora", input={"corpus": corpus}).output
    except NotFound:
        return []  # a node without the catalog (an older version)
    return [h for c in answer["corpora"] for h in c["hosts"] if h["hosting"]]


def label(host: dict[str, Any]) -> str:
    return host_label(str(host["node"]), host.get("node_name"))


def explain_unreachable(client: Client, corpus: str, exc: BusError) -> BusError:
    """What to tell a user whose call about ``corpus`` failed with ``exc`` (``not_found``/``partition``).

    No host known anywhere: "no corpus 'x'"; every host offline: which and since
    when.  Otherwise a host is up and its own error (a model to reindex, an
    embedder gone) is the one to show.
    """
    hosts = known_hosts(client, corpus)
    if not hosts:
        return NotFound(f"no corpus {corpus!r}; `hearthnet corpora` lists them")
    if any(h["serving"] for h in hosts):
        return exc
    where = " and ".join(f"{label(h)}, which is {seen_text(h)}" for h in hosts)
    return Partition(f"corpus {corpus!r} is hosted on {where}")


def hosted_here_or_there(client: Client, corpus: str, on: str | None) -> list[str]:
    """The nodes to ask about ``corpus``, preferred first (``--on`` alone if given)."""
    if on:
        return [on]
    hosts = known_hosts(client, corpus)
    serving = [str(h["node"]) for h in hosts if h["serving"]]
    if serving:
        return serving
    raise explain_unreachable(client, corpus, NotFound(f"no corpus {corpus!r}"))


# -- docs ---------------------------------------------------------------------------------
def cmd_docs(args: argparse.Namespace) -> None:
    from hearthnet.cli_data import _emit, shown

    corpus = corpus_arg(args.corpus)
    client = Client(args.home)
    docs: list[dict[str, Any]] = []
    after = ""
    provider: str | None = args.on
    warnings: list[str] = []
    total = 0
    try:
        while True:  # pages by doc_cid; the first answer's provider answers the rest
            result = client.call(
                "rag.list_documents",
                params={"corpus": corpus},
                input={"after": after, "limit": LIST_PAGE},
                provider=provider,
            )
            provider = result.provider
            warnings = list(result.meta.get("warnings") or warnings)
            docs.extend(result.output["documents"])
            total = int(result.output["total"])
            after = result.output.get("next") or ""
            if not after:
                break
    except (NotFound, Partition) as exc:
        raise explain_unreachable(client, corpus, exc) from None
    names = _node_names(client)
    lines = []
    for d in sorted(docs, key=lambda d: (str(d["title"]).lower(), d["doc_cid"])):
        by = d.get("ingested_by")
        when = d.get("ingested_at")
        facts = [
            str(d.get("filename") or "-"),
            "? pages" if d.get("pages") is None else plural(int(d["pages"]), "page"),
            plural(int(d["chunks"]), "chunk"),
            str(d.get("language") or "und"),
            f"by {host_label(by, names.get(by))}" if by else "by ?",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if isinstance(when, int | float) else "",
        ]
        lines.append(shown(str(d["title"])))
        lines.append("    " + shown(" | ".join(f for f in facts if f)))
        lines.append(f"    {d['doc_cid']}")
    where = host_label(str(provider), names.get(str(provider)))
    lines.append(f"{plural(total, 'document')} in {corpus} on {shown(where)}")
    warn(args, warnings)
    _emit(
        args,
        {"corpus": corpus, "node": provider, "total": total, "documents": docs, "warnings": warnings},
        "\n".join(lines),
    )


def _node_names(client: Client) -> dict[str, str]:
    """Names of this node and its connected peers, by id (for "ingested by")."""
    status = client.call("node.status").output
    names = {str(p["node_id"]): str(p.get("name") or "") for p in status.get("peers", [])}
    names[str(status["node_id"])] = str(status.get("name") or "")
    return {k: v for k, v in names.items() if v}


# -- delete -------------------------------------------------------------------------------
def cmd_delete(args: argparse.Namespace) -> None:
    from hearthnet.cli_data import _emit

    corpus = corpus_arg(args.corpus)
    if not args.doc_cid.startswith("blake3:"):
        raise BadRequest("DOC_CID is a document's blake3:<hex> id: `hearthnet docs --corpus C` lists them")
    client = Client(args.home)
    last: BusError | None = None
    for node in hosted_here_or_there(client, corpus, args.on):
        try:
            result = client.call(
                "rag.delete",
                params={"corpus": corpus},
                input={"doc_cid": args.doc_cid},
                provider=node,
                timeout=300,
            )
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
        _emit(
            args,
            out,
            f"deleted {args.doc_cid} from {corpus} on {result.provider}: "
            f"{plural(int(out['chunks_removed']), 'chunk')} removed{note}",
        )
        return
    assert last is not None
    raise last
