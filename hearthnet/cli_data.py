"""CLI commands for documents: ``file put|get|ls``, ``ingest``, ``query``, ``corpora``, ``rag reindex``.

All of them talk to the running node of ``--home`` through its control socket.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio

from hearthnet.bus.context import CallResult
from hearthnet.client import AsyncClient, Client
from hearthnet.errors import BadRequest, BusError
from hearthnet.services.rag.names import PERSONAL, SYSTEM, is_language, validate_corpus_name

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md", ".markdown")
MAX_K = 20
"""``rag.query``'s largest ``k`` (its ``k_max``)."""


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
    try:
        for item in client.stream(capability, **kw):
            if isinstance(item, CallResult):
                result = item
            else:
                progress.show(label, item)
    finally:
        progress.done()  # a failure is printed on a clean line
    assert result is not None
    return result


def shown(text: str) -> str:
    """``text`` safe for a terminal: control, format and undecodable characters as ``\\u`` escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else f"\\u{ord(ch):04x}" for ch in text)


def path_text(path: Path) -> str:
    """A path as text for output: bytes that are not UTF-8 become U+FFFD (JSON needs valid text)."""
    return os.fsencode(path).decode("utf-8", "replace")


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
        word
        for word, on in (
            ("pinned", blob["pinned"]),
            ("private", blob.get("private", False)),
            ("incomplete", not blob["complete"]),
        )
        if on
    )


# -- rag --------------------------------------------------------------------------------
def _failure(path: Path, code: str, message: str) -> dict[str, Any]:
    return {"path": path_text(path), "ok": False, "error": code, "message": message}


def _expand(paths: Iterable[str]) -> tuple[list[Path], list[dict[str, Any]]]:
    """The files to ingest, each once, in the order given; and failures for what cannot be walked.

    A folder contributes its supported files (``SUPPORTED_SUFFIXES``), sorted, skipping
    names that start with '.' (``.git/``, macOS ``._x.pdf`` resource forks) and following
    symlinked folders once each.  A file named directly is taken whatever its name.
    """
    files: list[Path] = []
    problems: list[dict[str, Any]] = []
    seen: set[Path] = set()

    def add(path: Path) -> None:
        try:
            key = path.resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
            problems.append(_failure(path, "bad_request", f"cannot resolve the path: {exc}"))
            return
        if key not in seen:
            seen.add(key)
            files.append(path)

    for p in paths:
        path = Path(p)
        try:
            is_dir = path.is_dir()
        except OSError as exc:
            problems.append(_failure(path, "bad_request", f"cannot read: {exc.strerror or exc}"))
            continue
        if not is_dir:
            add(path)
            continue
        for found in _walk(path, problems):
            add(found)
    return files, problems


def _walk(top: Path, problems: list[dict[str, Any]]) -> list[Path]:
    found: list[Path] = []
    visited: set[tuple[int, int]] = set()

    def unreadable(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else top
        problems.append(_failure(where, "bad_request", f"cannot read the folder: {exc.strerror or exc}"))

    for root, dirs, names in os.walk(top, onerror=unreadable, followlinks=True):
        try:
            st = os.stat(root)
        except OSError as exc:
            unreadable(exc)
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in visited:  # a symlinked folder seen already (or a loop)
            dirs[:] = []
            continue
        visited.add((st.st_dev, st.st_ino))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith(".") or Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            candidate = Path(root) / name
            try:
                if candidate.is_file():
                    found.append(candidate)
            except OSError as exc:
                problems.append(_failure(candidate, "bad_request", f"cannot read: {exc.strerror or exc}"))
    return found


def _corpus_host(client: Client, corpus: str, on: str | None) -> str:
    """Where to ingest: --on, the corpus's holder, this node, or any node accepting new corpora."""
    from hearthnet.frontends.placement import corpus_host

    return corpus_host(client.call("node.status").output, corpus, on)


def cmd_ingest(args: argparse.Namespace) -> None:
    corpus = validate_corpus_name(args.corpus)
    if corpus == SYSTEM:
        raise BadRequest("corpus system is read-only")
    if args.title is not None and not args.title.strip():
        raise BadRequest("--title is empty")
    if args.language is not None and not is_language(args.language):
        raise BadRequest("--language must be a short code such as 'en' or 'pt-BR', or 'auto'")
    files, problems = _expand(args.paths)
    if not files and not problems:
        raise BadRequest("no files to ingest (supported: PDF, .txt, .md)")
    if args.title is not None and len(files) > 1:
        raise BadRequest(f"--title names one document, but {len(files)} files were given")
    client = Client(args.home)
    host = _corpus_host(client, corpus, args.on)
    own = client.call("node.status").output["node_id"]
    progress = Progress(not args.json)
    results: list[dict[str, Any]] = []
    for entry in problems:
        _report(args, entry)
        results.append(entry)
    for path in files:
        entry = _ingest_one(args, client, progress, path, corpus, host, own)
        _report(args, entry)
        results.append(entry)
    failed = [r for r in results if not r["ok"]]
    if args.json:
        sys.stdout.write(json.dumps({"corpus": corpus, "node": host, "results": results}) + "\n")
    if failed:
        from hearthnet.cli import CliError

        raise CliError(f"{len(failed)} of {len(results)} files failed to ingest")


def _ingest_one(
    args: argparse.Namespace, client: Client, progress: Progress, path: Path, corpus: str, host: str, own: str
) -> dict[str, Any]:
    """One file: import (unpinned), move to the host if needed, ``rag.ingest``; never raises."""
    name = Path(path_text(path)).name or path_text(path)
    entry: dict[str, Any] = {"path": path_text(path)}
    try:
        try:
            full = str(path.resolve())
            full.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest("the file name is not valid UTF-8: rename the file") from None
        # Unpinned: the node that ingests the document pins its own copy once it is indexed,
        # so a file refused here (a scanned PDF, an unsupported type) leaves nothing held.
        # A personal document is private: peers are never told of it nor given it (file.read).
        imported = client.call(
            "file.import", input={"path": full, "pin": False, "private": corpus == PERSONAL}
        ).output
        entry["doc_cid"] = imported["doc_cid"]
        if host != own:
            _streamed(
                client, "file.push", progress, name, input={"doc_cid": imported["doc_cid"], "node": host}
            )
        inp: dict[str, Any] = {"doc_cid": imported["doc_cid"], "filename": name}
        if args.title is not None:
            inp["title"] = args.title  # otherwise the document's own title, or its file name
        if args.language is not None:
            inp["language"] = args.language
        result = _streamed(
            client,
            "rag.ingest",
            progress,
            name,
            params={"corpus": corpus},
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
    except BusError as exc:
        entry.update(ok=False, error=exc.code, message=exc.message)
    except (OSError, RuntimeError) as exc:  # e.g. a symlink loop met while resolving
        entry.update(ok=False, error="bad_request", message=str(exc))
    return entry


def _report(args: argparse.Namespace, entry: dict[str, Any]) -> None:
    if args.json:
        return
    name = shown(Path(entry["path"]).name or entry["path"])
    if entry["ok"]:
        note = " (already indexed)" if entry["existing"] else ""
        print(f"ok    {name}: {entry['chunks_indexed']} chunks{note}")
    else:
        print(f"FAIL  {name}: {entry['error']}: {shown(entry['message'])}")


def cmd_query(args: argparse.Namespace) -> None:
    from hearthnet.cli import _load_json

    if not 1 <= args.k <= MAX_K:
        raise BadRequest(f"-k must be between 1 and {MAX_K}")
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
        lines.append(f"{c['rank']:>2}. {c['score']:.3f}  {shown(where)}\n    {shown(snippet)}")
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
    for node, answer in anyio.run(_list_corpora_of, AsyncClient(args.home), nodes):
        if isinstance(answer, BusError):
            errors.append({"node": node, "error": answer.code, "message": answer.message})
        else:
            corpora.extend({**c, "node": node} for c in answer["corpora"])
    lines = [
        f"{c['name']:20} {c['docs']:>5} docs {c['chunks']:>7} chunks  {c.get('language_majority') or '-':4} "
        f"{shown(str(c['embedding_model']))}  {c['node']}"
        + ("" if c.get("served", True) else "  (not served: embedded with another model; rag reindex)")
        for c in corpora
    ]
    if not args.json:
        for e in errors:  # on stderr: stdout stays the list
            print(f"hearthnet: {e['node']}: {e['error']}: {shown(e['message'])}", file=sys.stderr)
    _emit(
        args,
        {"corpora": corpora, "errors": errors},
        "\n".join(lines) if lines else "(no corpora in the mesh)",
    )
    if nodes and len(errors) == len(nodes):
        from hearthnet.cli import CliError

        raise CliError(f"none of the {len(nodes)} nodes running rag answered rag.list_corpora")


LIST_TIMEOUT = 10.0
"""Seconds each node has to answer ``rag.list_corpora`` for ``hearthnet corpora``."""


async def _list_corpora_of(
    client: AsyncClient, nodes: list[str]
) -> list[tuple[str, dict[str, Any] | BusError]]:
    """Every node's ``rag.list_corpora`` answer (or error), asked at the same time, in ``nodes`` order."""
    answers: dict[str, dict[str, Any] | BusError] = {}
    limit = anyio.CapacityLimiter(16)

    async def ask(node: str) -> None:
        async with limit:
            try:
                answers[node] = (
                    await client.call("rag.list_corpora", provider=node, timeout=LIST_TIMEOUT)
                ).output
            except BusError as exc:
                answers[node] = exc

    async with anyio.create_task_group() as tg:
        for node in nodes:
            tg.start_soon(ask, node)
    return [(node, answers[node]) for node in nodes]


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
