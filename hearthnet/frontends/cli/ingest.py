"""``ingest``: files and folders into a corpus, on the node that hosts it (or takes it).

Each file is imported by this node (unpinned), pushed to the corpus's host if that is another
node, and ingested there with ``rag.ingest``; a failure is reported per file and never stops
the others.  Small files go in batches (``BATCH_FILES`` files of at most ``BATCH_FILE_BYTES``):
one ``file.import {paths}`` and one ``rag.ingest {documents}`` per batch, so the host embeds
and writes them together; each file is still stored atomically and reported on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio

from hearthnet.contracts.rag import SYSTEM, ingest_timeout, is_language, is_private
from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.cli.args import corpus_arg, meta_args
from hearthnet.frontends.cli.output import CliError, Progress, path_text, plural, shown, streamed
from hearthnet.frontends.client.client import AsyncClient, Client
from hearthnet.frontends.client.corpora import ingest_host

__all__ = ["SUPPORTED_SUFFIXES", "add_ingest"]

SUPPORTED_SUFFIXES = (".pdf", ".txt", ".md", ".markdown")
INGEST_TIMEOUT = 900.0
"""Seconds one file's ``rag.ingest`` may take (fetch, read, embed, write)."""
BATCH_FILES = 32
"""Small files ingested by one ``rag.ingest {documents}`` call."""
BATCH_FILE_BYTES = 256 * 1024
"""Files up to this size go in batches; larger ones (a book, a long PDF) are ingested one by one."""


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
                skipped.append(_skip(Path(root) / d, "hidden folder, not searched: its name starts with '.'"))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            candidate = Path(root) / name
            suffix = Path(name).suffix.lower()
            if name.startswith("."):
                skipped.append(_skip(candidate, "hidden: its name starts with '.'"))
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


STDIN_NAME = "stdin.txt"
"""The file name of a text ingested from stdin (``-``) when ``--filename`` gives none."""


def _stdin_name(name: str | None) -> str:
    """``--filename`` for a document read from stdin: a plain file name, at most 255 characters."""
    if name is None:
        return STDIN_NAME
    if not name.strip() or "/" in name or "\\" in name or name in (".", "..") or not name.isprintable():
        raise BadRequest("--filename must be a plain file name such as notes.md (no folders)")
    if len(name) > 255:
        raise BadRequest(f"--filename is {len(name)} characters long; at most 255")
    return name


def cmd_ingest(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    if corpus == SYSTEM:
        raise BadRequest("corpus system is read-only")
    if args.title is not None and not args.title.strip():
        raise BadRequest("--title is empty")
    if args.language is not None and not is_language(args.language):
        raise BadRequest("--language must be a short code such as 'en' or 'pt-BR', or 'auto'")
    args.metadata = meta_args(args.meta)
    if "-" in args.paths:
        if len(args.paths) > 1:
            raise BadRequest("'-' (the text on stdin) is one document: give no other paths with it")
        _ingest_stdin(args, corpus)
        return
    if args.filename is not None:
        raise BadRequest("--filename names the text read from stdin ('-'); files keep their own names")
    _ingest_paths(args, corpus)


def _ingest_stdin(args: argparse.Namespace, corpus: str) -> None:
    """The text (or file) on stdin as one document: written to a private temporary file named by
    ``--filename``, ingested like a file, the temporary file removed whatever happens."""
    name = _stdin_name(args.filename)
    folder = tempfile.mkdtemp(prefix="hearthnet-stdin-")
    try:
        path = Path(folder) / name
        with path.open("wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out)
        if path.stat().st_size == 0:
            raise BadRequest("nothing to ingest: stdin is empty")
        args.paths = [str(path)]
        _ingest_paths(args, corpus, shown_as={str(path): "-"})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _ingest_paths(args: argparse.Namespace, corpus: str, shown_as: dict[str, str] | None = None) -> None:
    skipped: list[dict[str, Any]] = []
    files, problems = _expand(args.paths, skipped)
    if not files and not problems:
        why = f": {_skipped_text(skipped)}" if skipped else ""
        raise BadRequest(f"no files to ingest (supported: PDF, .txt, .md, .markdown){why}")
    if args.title is not None and len(files) > 1:
        raise BadRequest(f"--title names one document, but {len(files)} files were given")
    walked = {path_text(f) for f in files} - {path_text(Path(p)) for p in args.paths}
    client = Client(args.home)
    host = anyio.run(ingest_host, AsyncClient(args.home), corpus, args.on)
    own = client.call("node.status").output["node_id"]
    progress = Progress(not args.json)
    results: list[dict[str, Any]] = []
    for entry in problems:
        _print_entry(args, entry)
        results.append(entry)
    for group in _groups(files, single=args.title is not None):
        if len(group) == 1:
            entries = [_ingest_one(args, client, progress, group[0], corpus, host, own)]
        else:
            entries = _ingest_batch(args, client, progress, group, corpus, host, own)
        for path, entry in zip(group, entries, strict=True):
            if shown_as and entry["path"] in shown_as:  # stdin: not the temporary file's path
                entry["path"] = shown_as[entry["path"]]
                entry["filename"] = path.name
            _print_entry(args, entry)
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
        raise CliError(f"{_files_of(len(failed), len(results) + len(skipped))} failed to ingest")


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
            "file.import", input={"path": full, "pin": False, "private": is_private(corpus)}
        ).output
        entry["doc_cid"] = imported["doc_cid"]
        if host != own:
            pushing = client.stream("file.push", input={"doc_cid": imported["doc_cid"], "node": host})
            streamed(pushing, progress, name)
        inp: dict[str, Any] = {"doc_cid": imported["doc_cid"], "filename": name}
        if args.title is not None:
            inp["title"] = args.title  # otherwise the document's own title, or its file name
        if args.language is not None:
            inp["language"] = args.language
        if args.metadata:
            inp["metadata"] = args.metadata
        ingesting = client.stream(
            "rag.ingest",
            params={"corpus": corpus},
            input=inp,
            provider=host,
            timeout=ingest_timeout(path.stat().st_size),
        )
        result = streamed(ingesting, progress, name)
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


def _groups(files: list[Path], *, single: bool) -> list[list[Path]]:
    """``files`` in order, runs of small ones cut into batches of ``BATCH_FILES``, others alone."""
    groups: list[list[Path]] = []
    run: list[Path] = []
    for path in files:
        try:
            small = not single and path.stat().st_size <= BATCH_FILE_BYTES
        except OSError:
            small = False  # reported by the one-file path, with the reason
        if small:
            run.append(path)
            if len(run) == BATCH_FILES:
                groups.append(run)
                run = []
            continue
        if run:
            groups.append(run)
            run = []
        groups.append([path])
    if run:
        groups.append(run)
    return groups


def _ingest_batch(
    args: argparse.Namespace,
    client: Client,
    progress: Progress,
    paths: list[Path],
    corpus: str,
    host: str,
    own: str,
) -> list[dict[str, Any]]:
    """Several small files: one import, a push each if the host is another node, one
    ``rag.ingest {documents}``; an entry per file, in order (never raises)."""
    entries: list[dict[str, Any]] = [{"path": path_text(p)} for p in paths]
    full: dict[int, str] = {}
    for i, path in enumerate(paths):
        try:
            name = str(path.resolve())
            name.encode("utf-8")
            full[i] = name
        except UnicodeEncodeError:
            why = "the file name is not valid UTF-8: rename the file"
            entries[i].update(_failure(path, "bad_request", why))
        except (OSError, RuntimeError) as exc:
            entries[i].update(_failure(path, "bad_request", str(exc)))
    try:
        if full:
            files = client.call(
                "file.import",
                input={"paths": list(full.values()), "pin": False, "private": is_private(corpus)},
            ).output["files"]
            for i, got in zip(full, files, strict=True):
                if "error" in got:
                    entries[i].update(ok=False, error=got["error"], message=got["message"])
                else:
                    entries[i]["doc_cid"] = got["doc_cid"]
        label = f"{len(paths)} files"
        if host != own:
            for i, entry in enumerate(entries):
                if "doc_cid" in entry and "ok" not in entry:
                    try:
                        push = {"doc_cid": entry["doc_cid"], "node": host}
                        pushing = client.stream("file.push", input=push)
                        streamed(pushing, progress, Path(entry["path"]).name)
                    except BusError as exc:
                        entries[i].update(ok=False, error=exc.code, message=exc.message)
        first: dict[str, int] = {}  # one document per content: a copy of a file is "already indexed"
        documents = []
        for i, entry in enumerate(entries):
            if "ok" in entry or "doc_cid" not in entry:
                continue
            if entry["doc_cid"] in first:
                continue
            first[entry["doc_cid"]] = i
            doc: dict[str, Any] = {"doc_cid": entry["doc_cid"], "filename": Path(entry["path"]).name}
            if args.language is not None:
                doc["language"] = args.language
            if args.metadata:
                doc["metadata"] = args.metadata
            documents.append(doc)
        if documents:
            ingesting = client.stream(
                "rag.ingest",
                params={"corpus": corpus},
                input={"documents": documents},
                provider=host,
                timeout=INGEST_TIMEOUT,
            )
            result = streamed(ingesting, progress, label)
            answered = {d["doc_cid"]: d for d in result.output["documents"]}
            for i, entry in enumerate(entries):
                if "ok" in entry or "doc_cid" not in entry:
                    continue
                got = answered[entry["doc_cid"]]
                if not got["ok"]:
                    entry.update(ok=False, error=got["error"], message=got["message"])
                    continue
                entry.update(
                    ok=True,
                    chunks_indexed=got["chunks_indexed"],
                    tokens_indexed=got["tokens_indexed"],
                    event_id=got.get("ingest_event_id"),
                    node=result.provider,
                    existing=bool(got["existing"]) or first[entry["doc_cid"]] != i,
                )
                if "ocr_pages" in got and not entry["existing"]:  # as one file's result has it
                    entry["ocr_pages"] = got["ocr_pages"]
    except BusError as exc:  # the call as a whole failed: every file not answered yet failed with it
        for entry in entries:
            if "ok" not in entry:
                entry.update(ok=False, error=exc.code, message=exc.message)
    return entries


def _print_entry(args: argparse.Namespace, entry: dict[str, Any]) -> None:
    if args.json:
        return
    name = shown(entry.get("filename") or Path(entry["path"]).name or entry["path"])
    if entry["ok"]:
        note = " (already indexed)" if entry["existing"] else ""
        if entry.get("ocr_pages"):
            note += f", {plural(len(entry['ocr_pages']), 'page')} read by OCR"
        print(f"ok    {name}: {plural(int(entry['chunks_indexed']), 'chunk')}{note}")
    else:
        print(f"FAIL  {name}: {entry['error']}: {shown(entry['message'])}")


SKIPPED_NAMED = 5
"""Skipped files the summary line names (``--json`` lists them all)."""


def _skipped_text(skipped: list[dict[str, Any]]) -> str:
    named = [f"{Path(s['path']).name} ({s['reason']})" for s in skipped[:SKIPPED_NAMED]]
    more = len(skipped) - len(named)
    return "; ".join(named) + (f"; and {more} more (--json lists them)" if more > 0 else "")


def _files_of(n: int, total: int) -> str:
    """``2 of 5 files``; ``1 file`` or ``all 3 files`` when ``n`` is every one of them."""
    if n == total:
        return plural(n, "file") if n == 1 else f"all {n} files"
    return f"{n} of {plural(total, 'file')}"


def _summary(results: list[dict[str, Any]], skipped: list[dict[str, Any]], corpus: str, host: str) -> str:
    """One line a person can read: what went in, what failed, what was skipped and why (counted
    out of every file found, as the failure line on stderr counts them)."""
    ok = [r for r in results if r["ok"]]
    failed = len(results) - len(ok)
    existing = sum(1 for r in ok if r["existing"])
    chunks = sum(int(r["chunks_indexed"]) for r in ok)
    considered = len(results) + len(skipped)
    line = (
        f"ingested {_files_of(len(ok), considered)} into {corpus} on {host} "
        f"({plural(chunks, 'chunk')}" + (f", {existing} already indexed" if existing else "") + ")"
    )
    if failed:
        line += f", {failed} failed"
    if skipped:
        line += f", {len(skipped)} skipped: {_skipped_text(skipped)}"
    return line


def add_ingest(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ingest", parents=[common], help="ingest files or directories into a corpus")
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files (PDF, .txt, .md) or folders, walked for those; names starting with '.' skipped; "
        "'-' reads one document from stdin",
    )
    p.add_argument(
        "--corpus", required=True, help="corpus to add to; 'personal' never leaves this node (required)"
    )
    p.add_argument(
        "--title", help="the document's title, for one file only (default: its own title, else its file name)"
    )
    p.add_argument(
        "--meta",
        action="append",
        metavar="KEY=VALUE",
        help="metadata of every document ingested, repeatable: true/false, 42 and 0.5 are typed, "
        "anything else (an ISO date too) is text; KEY:TYPE=VALUE names the type "
        "(str, int, float, bool, date); filter on it with 'query --filter' (default: none)",
    )
    p.add_argument(
        "--filename",
        metavar="NAME",
        help=f"the file name of the document read from stdin ('-'), e.g. notes.md (default: {STDIN_NAME})",
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
