"""CLI commands for documents: ``file put|get|ls``, ``ingest``, ``query``, ``corpora``, ``rag reindex``
(``docs`` and ``delete`` are in :mod:`hearthnet.cli_rag`).

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
from hearthnet.cli_rag import (
    cmd_delete,
    cmd_docs,
    corpus_arg,
    explain_unreachable,
    known_hosts,
    plural,
    seen_text,
    warn,
)
from hearthnet.client import AsyncClient, Client
from hearthnet.errors import BadRequest, BusError, NotFound, Partition
from hearthnet.services.rag.names import PERSONAL, SYSTEM, host_label, is_language

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
def node_path(text: str, what: str, fix: str) -> str:
    """``text`` as an absolute path for the node (whose working directory is not ours).

    Nothing is resolved: a symbolic link stays a link for the node to judge (``file.export``
    never writes through one; ``file.import`` reads through it), and a symlink loop is the
    node's clear error, not ours.  A name that is not valid UTF-8 cannot travel to the node.
    """
    full = text if os.path.isabs(text) else os.path.join(os.getcwd(), text)
    try:
        full.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"the {what} {shown(path_text(Path(full)))} is not valid UTF-8: {fix}") from None
    return full


def cmd_file_put(args: argparse.Namespace) -> None:
    client = Client(args.home)
    path = node_path(args.path, "file name", "rename the file")
    if not args.on:
        imported = client.call("file.import", input={"path": path}).output
        _emit(args, {**imported, "pushed_to": None, "push": None}, imported["doc_cid"])
        return
    # One call: the node imports, pushes, and pins only if the push succeeded; a refused
    # push leaves nothing here that the import created.
    pushed = dict(
        _streamed(
            client,
            "file.push",
            Progress(not args.json),
            Path(path).name,
            input={"path": path, "node": args.on},
        ).output
    )
    imported = pushed.pop("imported")
    _emit(args, {**imported, "pushed_to": args.on, "push": pushed}, imported["doc_cid"])


def cmd_file_get(args: argparse.Namespace) -> None:
    from hearthnet.blobs.destination import check_destination, destination_path

    out = node_path(args.out, "output path", "choose a UTF-8 name")
    check_destination(destination_path(out), force=args.force)  # before a long fetch; export checks again
    client = Client(args.home)
    fetched = _streamed(
        client, "file.fetch", Progress(not args.json), args.cid, input={"doc_cid": args.cid}
    ).output
    exported = client.call(
        "file.export", input={"doc_cid": args.cid, "path": out, "force": args.force}
    ).output
    _emit(
        args,
        {**fetched, **exported},
        f"{args.cid} -> {shown(out)} ({exported['size']} bytes, from {fetched['source']})",
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


def _expand(
    paths: Iterable[str], skipped: list[dict[str, Any]] | None = None
) -> tuple[list[Path], list[dict[str, Any]]]:
    """The files to ingest, each once, in the order given; and failures for what cannot be walked.

    A folder contributes its supported files (``SUPPORTED_SUFFIXES``), sorted, skipping
    names that start with '.' (``.git/``, macOS ``._x.pdf`` resource forks) and following
    symlinked folders once each; what it skips goes to ``skipped`` (``{path, reason}``).
    A file named directly is taken whatever its name.
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
        for found in _walk(path, problems, skipped if skipped is not None else []):
            add(found)
    return files, problems


def _walk(top: Path, problems: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> list[Path]:
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
        for d in sorted(dirs):
            if d.startswith("."):
                skipped.append(
                    _skip(Path(root) / d, "hidden folder (its name starts with '.'), not searched")
                )
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            candidate = Path(root) / name
            suffix = Path(name).suffix.lower()
            if name.startswith("."):
                skipped.append(_skip(candidate, "hidden (its name starts with '.')"))
                continue
            if suffix not in SUPPORTED_SUFFIXES:
                kind = f"unsupported type {suffix}" if suffix else "no file extension"
                skipped.append(_skip(candidate, f"{kind}: only .pdf, .txt, .md and .markdown are ingested"))
                continue
            try:
                if candidate.is_file():
                    found.append(candidate)
                else:
                    skipped.append(_skip(candidate, "not a regular file"))
            except OSError as exc:
                problems.append(_failure(candidate, "bad_request", f"cannot read: {exc.strerror or exc}"))
    return found


def _skip(path: Path, reason: str) -> dict[str, Any]:
    return {"path": path_text(path), "reason": reason}


def _corpus_host(client: Client, corpus: str, on: str | None) -> str:
    """Where to ingest: the corpus's host, else --on, this node, or any node accepting new corpora
    (the rule every front door follows: :func:`hearthnet.frontends.placement.corpus_host`)."""
    from hearthnet.frontends.placement import corpus_host

    return corpus_host(client.call("node.status").output, corpus, on, known_hosts(client, corpus))


def cmd_ingest(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    if corpus == SYSTEM:
        raise BadRequest("corpus system is read-only")
    if args.title is not None and not args.title.strip():
        raise BadRequest("--title is empty")
    if args.language is not None and not is_language(args.language):
        raise BadRequest("--language must be a short code such as 'en' or 'pt-BR', or 'auto'")
    skipped: list[dict[str, Any]] = []
    files, problems = _expand(args.paths, skipped)
    if not files and not problems:
        why = f": {_skipped_text(skipped)}" if skipped else ""
        raise BadRequest(f"no files to ingest (supported: PDF, .txt, .md, .markdown){why}")
    if args.title is not None and len(files) > 1:
        raise BadRequest(f"--title names one document, but {len(files)} files were given")
    walked = {path_text(f) for f in files} - {path_text(Path(p)) for p in args.paths}
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
    readmes = [
        r for r in results if r["ok"] and Path(r["path"]).stem.lower() == "readme" and r["path"] in walked
    ]
    summary = _summary(results, skipped, corpus, host)
    if args.json:
        document = {
            "corpus": corpus,
            "node": host,
            "results": results,
            "skipped": skipped,
            "summary": summary,
        }
        sys.stdout.write(json.dumps(document) + "\n")
    else:
        for r in readmes:  # a folder's README is usually about the folder: say it became a document
            print(
                f"note  {shown(r['path'])} was ingested as a document of {corpus}; if it only describes "
                f"the folder, remove it with 'hearthnet delete {r['doc_cid']} --corpus {corpus}'"
            )
        print(shown(summary))
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
        print(f"ok    {name}: {plural(int(entry['chunks_indexed']), 'chunk')}{note}")
    else:
        print(f"FAIL  {name}: {entry['error']}: {shown(entry['message'])}")


SKIPPED_NAMED = 5
"""Skipped files the summary line names (``--json`` lists them all)."""


def _skipped_text(skipped: list[dict[str, Any]]) -> str:
    named = [f"{Path(s['path']).name} ({s['reason']})" for s in skipped[:SKIPPED_NAMED]]
    more = len(skipped) - len(named)
    return "; ".join(named) + (f"; and {more} more (--json lists them)" if more > 0 else "")


def _summary(results: list[dict[str, Any]], skipped: list[dict[str, Any]], corpus: str, host: str) -> str:
    """One line a person can read: what went in, what failed, what was skipped and why."""
    ok = [r for r in results if r["ok"]]
    failed = len(results) - len(ok)
    existing = sum(1 for r in ok if r["existing"])
    chunks = sum(int(r["chunks_indexed"]) for r in ok)
    considered = len(results) + len(skipped)
    line = (
        f"ingested {len(ok)} of {plural(considered, 'file')} into {corpus} on {host} "
        f"({plural(chunks, 'chunk')}" + (f", {existing} already indexed" if existing else "") + ")"
    )
    if failed:
        line += f", {failed} failed"
    if skipped:
        line += f", {len(skipped)} skipped: {_skipped_text(skipped)}"
    return line


MAX_STDIN_QUERY = 64 * 1024
"""Most bytes ``query -`` reads from stdin (the node takes queries of at most 8,192 characters)."""


def cmd_query(args: argparse.Namespace) -> None:
    from hearthnet.cli import _load_json

    if not 1 <= args.k <= MAX_K:
        raise BadRequest(f"-k must be between 1 and {MAX_K}")
    corpus = corpus_arg(args.corpus)
    text = args.text
    if text == "-":  # the question from stdin: a long one, or one with quotes the shell would eat
        text = sys.stdin.read(MAX_STDIN_QUERY + 1)
        if len(text) > MAX_STDIN_QUERY:
            raise BadRequest(f"the query on stdin is longer than {MAX_STDIN_QUERY} characters")
        if not text.strip():
            raise BadRequest("the query read from stdin is empty")
    inp: dict[str, Any] = {"query": text.strip(), "k": args.k}
    if args.filter:
        inp["filter"] = _load_json(args.filter, "--filter")
    client = Client(args.home)
    try:
        result = client.call("rag.query", params={"corpus": corpus}, input=inp)
    except (NotFound, Partition) as exc:
        raise explain_unreachable(client, corpus, exc) from None
    chunks = result.output["chunks"]
    lines = []
    for c in chunks:
        md = c["metadata"]
        snippet = " ".join(str(c.get("text") or "").split())[:160]
        source = md.get("doc_filename") or md.get("doc_title", "?")
        where = f"{source} p.{md.get('page', '?')}"
        title = md.get("doc_title")
        if md.get("doc_filename") and title and title != Path(str(source)).stem:
            where += f"  ({title})"
        lines.append(f"{c['rank']:>2}. {c['score']:.3f}  {shown(where)}\n    {shown(snippet)}")
    warn(args, list(result.meta.get("warnings") or []))
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
    _add_known(client, corpora)
    lines = [_corpus_line(c) for c in corpora]
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


def _add_known(client: Client, corpora: list[dict[str, Any]]) -> None:
    """Add the corpora of offline hosts (from the event log) and flag names hosted twice."""
    try:
        known = client.call("rag.known_corpora").output["corpora"]
    except NotFound:
        return  # a node without the catalog (an older version)
    listed = {(c["name"], c["node"]) for c in corpora}
    for entry in known:
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


def _corpus_line(c: dict[str, Any]) -> str:
    model = shown(str(c.get("embedding_model") or "-"))
    line = (
        f"{c['name']:20} {c['docs']:>5} docs {c['chunks']:>7} chunks  {c.get('language_majority') or '-':4} "
        f"{model}  {c['node']}"
    )
    if c.get("offline"):
        line += f"  (OFFLINE: {c['seen']})"
    elif not c.get("served", True):
        line += "  (not served: embedded with another model; rag reindex)"
    if "duplicate_of" in c:
        line += f"  (DUPLICATE name: queries go to the copy on {c['duplicate_of']})"
    elif c.get("hosts"):
        others = [n for n in c["hosts"] if n != c["node"]]
        line += f"  (name also used on {', '.join(others)}: queries go here)"
    return line


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
    corpus = corpus_arg(args.corpus)
    client = Client(args.home)
    try:
        result = _streamed(
            client,
            "rag.reindex",
            Progress(not args.json),
            corpus,
            input={"corpus": corpus},
            timeout=3600,
        )
    except NotFound:
        own = client.call("node.status").output["node_id"]
        hosts = [h for h in known_hosts(client, corpus) if h["node"] != own]
        if not hosts:
            raise
        where = " and ".join(shown(host_label(h["node"], h.get("node_name"))) for h in hosts)
        raise NotFound(
            f"corpus {corpus} is not on this node: it is hosted on {where}: "
            f"run 'hearthnet rag reindex --corpus {corpus}' there"
        ) from None
    _emit(
        args,
        result.output,
        f"reindexed {plural(int(result.output['docs']), 'document')} of {corpus} "
        f"with {result.output['embedding_model']}",
    )


def register_data_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("file", parents=[common], help="content-addressed blobs")
    fsub = p.add_subparsers(dest="file_command", required=True, metavar="ACTION")
    fp = fsub.add_parser(
        "put", parents=[common], help="store a file (and push it to a node); prints its doc_cid"
    )
    fp.add_argument("path", help="the file to store")
    fp.add_argument(
        "--on", metavar="NODE_ID", help="also push the blob to this node (default: kept on this node only)"
    )
    fp.set_defaults(func=cmd_file_put)
    fg = fsub.add_parser("get", parents=[common], help="fetch a blob from this node or the mesh")
    fg.add_argument("cid", help="the blob's doc_cid, as printed by 'file put' or 'file ls'")
    fg.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="file to write the blob to (required); an existing path is refused unless --force",
    )
    fg.add_argument(
        "--force",
        action="store_true",
        help="replace an existing regular file at --out, keeping its permissions (default: refuse; "
        "a symbolic link, a directory, a FIFO or a device is refused even so)",
    )
    fg.set_defaults(func=cmd_file_get)
    fl = fsub.add_parser("ls", parents=[common], help="blobs held by this node")
    fl.add_argument(
        "--prefix", metavar="CID_PREFIX", help="only blobs whose doc_cid starts with this (default: all)"
    )
    fl.set_defaults(func=cmd_file_ls)

    p = sub.add_parser("ingest", parents=[common], help="ingest files or directories into a corpus")
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files (PDF, .txt, .md) or folders, walked for those; names starting with '.' skipped",
    )
    p.add_argument(
        "--corpus", required=True, help="corpus to add to; 'personal' never leaves this node (required)"
    )
    p.add_argument(
        "--title", help="the document's title, for one file only (default: its own title, else its file name)"
    )
    p.add_argument(
        "--language",
        metavar="CODE",
        help="language code such as 'en' or 'pt-BR' (default: auto, detected from the text)",
    )
    p.add_argument(
        "--on",
        metavar="NODE_ID",
        help="node that hosts the corpus (default: the node holding it, this node, "
        "or one accepting new corpora)",
    )
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("query", parents=[common], help="search a corpus anywhere in the mesh")
    p.add_argument("text", help="the question; '-' reads it from stdin")
    p.add_argument("--corpus", required=True, help="corpus to search (required)")
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
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("corpora", parents=[common], help="every corpus reachable in the mesh, with its node")
    p.set_defaults(func=cmd_corpora)

    p = sub.add_parser(
        "docs", parents=[common], help="the documents of a corpus (title, file, pages, chunks, who, when)"
    )
    p.add_argument("--corpus", required=True, help="the corpus to list")
    p.add_argument(
        "--on", metavar="NODE_ID", help="ask this host (default: the corpus's host, the largest copy first)"
    )
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser(
        "delete", parents=[common], help="delete a document from a corpus, on its host (trusted members)"
    )
    p.add_argument("doc_cid", metavar="DOC_CID", help="the document's id ('hearthnet docs' lists them)")
    p.add_argument("--corpus", required=True, help="the corpus it is in")
    p.add_argument(
        "--on", metavar="NODE_ID", help="the host to delete it on (default: the corpus's host that has it)"
    )
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("rag", parents=[common], help="RAG maintenance")
    rsub = p.add_subparsers(dest="rag_command", required=True, metavar="ACTION")
    rr = rsub.add_parser(
        "reindex", parents=[common], help="re-embed a corpus from its blobs with this node's model"
    )
    rr.add_argument("--corpus", required=True, help="corpus on this node to re-embed (required)")
    rr.set_defaults(func=cmd_rag_reindex)
