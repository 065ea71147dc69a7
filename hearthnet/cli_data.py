"""CLI commands for documents: ``file put|get|ls``, ``ingest``, ``query``, ``corpora``, ``rag reindex``.

All of them talk to the running node of ``--home`` through its control socket.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.client import Client
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.services.rag.names import PERSONAL

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md", ".markdown")


class Progress:
    """One status line on stderr (only for humans: silent with --json or when not a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()

    def show(self, label: str, frame: dict[str, Any]) -> None:
        if not self.enabled:
            return
        current, total = frame.get("current", 0), frame.get("total", 0) or 1
        width = 24
        filled = int(width * min(1.0, current / total))
        sys.stderr.write(
            f"\r  {label[:40]:40} {frame.get('stage', ''):6} [{'#' * filled:{width}}] {current}/{total}"
        )
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 90 + "\r")
            sys.stderr.flush()


def _streamed(client: Client, capability: str, progress: Progress, label: str, **kw: Any) -> CallResult:
    result: CallResult | None = None
    for item in client.stream(capability, **kw):
        if isinstance(item, CallResult):
            result = item
        else:
            progress.show(label, item)
    progress.done()
    assert result is not None
    return result


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    from hearthnet.cli import _jsonable

    if args.json:
        sys.stdout.write(json.dumps(_jsonable(document), ensure_ascii=False) + "\n")
    else:
        print(text)


# -- file -------------------------------------------------------------------------------
def cmd_file_put(args: argparse.Namespace) -> None:
    client = Client(args.home)
    path = Path(args.path).resolve()
    imported = client.call("file.import", input={"path": str(path)}).output
    pushed = None
    if args.on:
        pushed = _streamed(
            client,
            "file.push",
            Progress(not args.json),
            path.name,
            input={"doc_cid": imported["doc_cid"], "node": args.on},
        ).output
    _emit(args, {**imported, "pushed_to": args.on, "push": pushed}, imported["doc_cid"])


def cmd_file_get(args: argparse.Namespace) -> None:
    client = Client(args.home)
    fetched = _streamed(
        client, "file.fetch", Progress(not args.json), args.cid, input={"doc_cid": args.cid}
    ).output
    out = str(Path(args.out).resolve())
    exported = client.call("file.export", input={"doc_cid": args.cid, "path": out}).output
    _emit(
        args,
        {**fetched, **exported},
        f"{args.cid} -> {out} ({exported['size']} bytes, from {fetched['source']})",
    )


def cmd_file_ls(args: argparse.Namespace) -> None:
    client = Client(args.home)
    blobs: list[dict[str, Any]] = []
    after = ""
    truncated = False
    while True:  # file.list answers in pages; `after` continues from the last cid seen
        page = client.call("file.list", input={"prefix": args.prefix or "", "after": after}).output
        blobs.extend(page["blobs"])
        truncated = bool(page.get("truncated"))
        if not truncated or not page["blobs"]:
            break
        after = page["blobs"][-1]["doc_cid"]
    lines = [f"{b['doc_cid']}  {b['size']:>12}  {_blob_state(b)}".rstrip() for b in blobs]
    if truncated:
        lines.append("(list truncated)")
    incomplete = sum(1 for b in blobs if not b["complete"])
    if incomplete:
        lines.append(f"({incomplete} incomplete: chunks missing; `hearthnet file get <cid>` completes one)")
    _emit(args, {"blobs": blobs, "truncated": truncated}, "\n".join(lines) if lines else "(no blobs)")


def _blob_state(blob: dict[str, Any]) -> str:
    return " ".join(
        word for word, on in (("pinned", blob["pinned"]), ("incomplete", not blob["complete"])) if on
    )


# -- rag --------------------------------------------------------------------------------
def _expand(paths: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(
                sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in SUPPORTED_SUFFIXES)
            )
        else:
            files.append(path)
    return files


def _corpus_host(client: Client, corpus: str, on: str | None) -> str:
    """Where to ingest: --on, the corpus's holder, this node, or any node accepting new corpora."""
    status = client.call("node.status").output
    own = status["node_id"]
    if corpus == PERSONAL:
        if on and on != own:
            raise BadRequest("the personal corpus stays on this node: --on cannot name another node")
        return str(own)  # never push a personal document to a peer, whatever it advertises
    if on:
        return on
    caps = status["capabilities"]
    holders = [
        c["node"]
        for c in caps
        if c["capability"].startswith("rag.query@") and c["params"].get("corpus") == corpus
    ]
    if holders:
        return str(own if own in holders else holders[0])
    ingesters = [c for c in caps if c["capability"].startswith("rag.ingest@")]
    if any(c["node"] == own for c in ingesters):
        return str(own)
    accepting = [c["node"] for c in ingesters if c["params"].get("accepts_new")]
    if accepting:
        return str(accepting[0])
    raise NotFound(
        f"no node in the mesh hosts corpus {corpus} or accepts new corpora (is any node running rag?)"
    )


def cmd_ingest(args: argparse.Namespace) -> None:
    client = Client(args.home)
    files = _expand(args.paths)
    if not files:
        raise BadRequest("no files to ingest (supported: PDF, .txt, .md)")
    host = _corpus_host(client, args.corpus, args.on)
    own = client.call("node.status").output["node_id"]
    progress = Progress(not args.json)
    results: list[dict[str, Any]] = []
    for path in files:
        entry: dict[str, Any] = {"path": str(path)}
        try:
            imported = client.call("file.import", input={"path": str(path.resolve())}).output
            entry["doc_cid"] = imported["doc_cid"]
            if host != own:
                _streamed(
                    client,
                    "file.push",
                    progress,
                    path.name,
                    input={"doc_cid": imported["doc_cid"], "node": host},
                )
            inp: dict[str, Any] = {"doc_cid": imported["doc_cid"], "filename": path.name}
            if args.title and len(files) == 1:
                inp["title"] = args.title  # otherwise the document's own title, or its file name
            if args.language:
                inp["language"] = args.language
            result = _streamed(
                client,
                "rag.ingest",
                progress,
                path.name,
                params={"corpus": args.corpus},
                input=inp,
                provider=host,
                timeout=900,
            )
            entry.update(
                ok=True,
                **result.output,
                event_id=result.meta.get("ingest_event_id"),
                node=result.provider,
                existing=bool(result.meta.get("existing")),
            )
            if not args.json:
                note = " (already indexed)" if entry["existing"] else ""
                print(f"ok    {path.name}: {entry['chunks_indexed']} chunks{note}")
        except BusError as exc:
            entry.update(ok=False, error=exc.code, message=exc.message)
            if not args.json:
                print(f"FAIL  {path.name}: {exc.code}: {exc.message}")
        except OSError as exc:
            entry.update(ok=False, error="bad_request", message=str(exc))
            if not args.json:
                print(f"FAIL  {path.name}: bad_request: {exc}")
        results.append(entry)
    failed = [r for r in results if not r["ok"]]
    if args.json:
        sys.stdout.write(json.dumps({"corpus": args.corpus, "node": host, "results": results}) + "\n")
    if failed:
        from hearthnet.cli import CliError

        raise CliError(f"{len(failed)} of {len(results)} files failed to ingest")


def cmd_query(args: argparse.Namespace) -> None:
    from hearthnet.cli import _load_json

    inp: dict[str, Any] = {"query": args.text, "k": args.k}
    if args.filter:
        inp["filter"] = _load_json(args.filter, "--filter")
    result = Client(args.home).call("rag.query", params={"corpus": args.corpus}, input=inp)
    chunks = result.output["chunks"]
    lines = []
    for c in chunks:
        md = c["metadata"]
        snippet = " ".join(str(c.get("text") or "").split())[:160]
        where = f"{md.get('doc_title', '?')} p.{md.get('page', '?')}"
        lines.append(f"{c['rank']:>2}. {c['score']:.3f}  {where}\n    {snippet}")
    document = {"chunks": chunks, "meta": result.meta, "provider": result.provider}
    _emit(args, document, "\n".join(lines) if lines else "(no matches)")


def cmd_corpora(args: argparse.Namespace) -> None:
    client = Client(args.home)
    status = client.call("node.status").output
    nodes = sorted(
        {c["node"] for c in status["capabilities"] if c["capability"].startswith("rag.list_corpora@")}
    )
    corpora: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    for node in nodes:
        try:
            out = client.call("rag.list_corpora", provider=node, timeout=10).output
        except BusError as exc:
            errors.append({"node": node, "error": exc.code, "message": exc.message})
            continue
        corpora.extend({**c, "node": node} for c in out["corpora"])
    lines = [
        f"{c['name']:20} {c['docs']:>5} docs {c['chunks']:>7} chunks  {c.get('language_majority') or '-':4} "
        f"{c['embedding_model']}  {c['node']}"
        for c in corpora
    ]
    _emit(
        args,
        {"corpora": corpora, "errors": errors},
        "\n".join(lines) if lines else "(no corpora in the mesh)",
    )


def cmd_rag_reindex(args: argparse.Namespace) -> None:
    client = Client(args.home)
    result = _streamed(
        client,
        "rag.reindex",
        Progress(not args.json),
        args.corpus,
        input={"corpus": args.corpus},
        timeout=3600,
    )
    _emit(
        args,
        result.output,
        f"reindexed {result.output['docs']} documents of {args.corpus} "
        f"with {result.output['embedding_model']}",
    )


def register_data_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("file", parents=[common], help="content-addressed blobs")
    fsub = p.add_subparsers(dest="file_command", required=True)
    fp = fsub.add_parser(
        "put", parents=[common], help="store a file (and push it to a node); prints its doc_cid"
    )
    fp.add_argument("path")
    fp.add_argument("--on", metavar="NODE_ID")
    fp.set_defaults(func=cmd_file_put)
    fg = fsub.add_parser("get", parents=[common], help="fetch a blob from this node or the mesh")
    fg.add_argument("cid")
    fg.add_argument("--out", required=True)
    fg.set_defaults(func=cmd_file_get)
    fl = fsub.add_parser("ls", parents=[common], help="blobs held by this node")
    fl.add_argument("--prefix")
    fl.set_defaults(func=cmd_file_ls)

    p = sub.add_parser("ingest", parents=[common], help="ingest files or directories into a corpus")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--corpus", required=True)
    p.add_argument("--title")
    p.add_argument("--language")
    p.add_argument("--on", metavar="NODE_ID", help="node that hosts the corpus")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("query", parents=[common], help="search a corpus anywhere in the mesh")
    p.add_argument("text")
    p.add_argument("--corpus", required=True)
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--filter", help='JSON metadata conditions, e.g. {"page": {"$gte": 3}}')
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("corpora", parents=[common], help="every corpus reachable in the mesh, with its node")
    p.set_defaults(func=cmd_corpora)

    p = sub.add_parser("rag", parents=[common], help="RAG maintenance")
    rsub = p.add_subparsers(dest="rag_command", required=True)
    rr = rsub.add_parser(
        "reindex", parents=[common], help="re-embed a corpus from its blobs with this node's model"
    )
    rr.add_argument("--corpus", required=True)
    rr.set_defaults(func=cmd_rag_reindex)
