"""``ingest``: files and folders into a corpus, on the node that hosts it (or takes it).

Each group of files goes through the client's one ingest flow
(:func:`hearthnet.frontends.client.ingest.ingest_files`: import, push to the corpus's host, one
``rag.ingest``); a failure is reported per file and never stops the others.  Small files go in
batches (``BATCH_FILES`` files of at most ``BATCH_FILE_BYTES``), so the host embeds and writes
them together; a large one goes alone.  Each file is still stored atomically and reported on
its own.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hearthnet.contracts import formats
from hearthnet.contracts.rag import PERSONAL, SYSTEM, RagClient, is_language
from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.cli.args import corpus_arg, meta_args
from hearthnet.frontends.cli.output import CliError, Progress, path_text, plural, shown
from hearthnet.frontends.client.client import Client
from hearthnet.frontends.client.corpora import ingest_host
from hearthnet.frontends.client.ingest import Document, ingest_files

__all__ = ["add_ingest"]

BATCH_FILES = 32
"""Small files ingested by one ``rag.ingest {documents}`` call."""
BATCH_FILE_BYTES = 256 * 1024
"""Files up to this size go in batches; larger ones (a book, a long PDF) are ingested one by one."""


_SUFFIXES = ", ".join(formats.SUFFIXES)


def _failure(path: Path, code: str, message: str) -> dict[str, Any]:
    return {"path": path_text(path), "ok": False, "error": code, "message": message}


def _expand(
    paths: Iterable[str], skipped: list[dict[str, Any]] | None = None
) -> tuple[list[Path], list[dict[str, Any]]]:
    """The files to ingest, each once, in the order given; and failures for what cannot be walked.

    A folder contributes the files of the formats HearthNet reads
    (:mod:`~hearthnet.contracts.formats`), sorted, skipping names that start with '.' (``.git/``,
    macOS ``._x.pdf`` resource forks) and following symlinked folders once each; what it skips
    goes to ``skipped`` (``{path, reason}``).
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
            if formats.by_suffix(name) is None:
                kind = f"unsupported type {suffix}" if suffix else "no file extension"
                skipped.append(_skip(candidate, f"{kind}: only {_SUFFIXES} are ingested"))
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
        raise BadRequest(f"no files to ingest (supported: {formats.supported_text()}){why}")
    if args.title is not None and len(files) > 1:
        raise BadRequest(f"--title names one document, but {len(files)} files were given")
    walked = {path_text(f) for f in files} - {path_text(Path(p)) for p in args.paths}
    client = Client(args.home)
    host = client.run(lambda c: ingest_host(c, corpus, args.on))
    new = _new_corpus(client, corpus)  # asked before: once ingested, it is known
    progress = Progress(not args.json)
    results: list[dict[str, Any]] = []
    for entry in problems:
        _print_entry(args, entry)
        results.append(entry)
    for group in _groups(files, single=args.title is not None):
        entries = _ingest_group(args, client, progress, group, corpus, host)
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
    made = new is not None and any(r["ok"] for r in results)
    if made:  # a mistyped name made a corpus: say so where the summary is read
        summary += f"; {new}"
    if args.json:
        document = {
            "corpus": corpus,
            "node": host,
            "results": results,
            "skipped": skipped,
            "summary": summary,
            "new_corpus": made,
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


def _documents(paths: list[Path], title: str | None) -> tuple[list[Document], dict[int, dict[str, Any]]]:
    """The files of a group as documents for the node (their full, UTF-8 paths); and the
    failures, by position, of those that cannot be named to it."""
    documents: list[Document] = []
    failed: dict[int, dict[str, Any]] = {}
    for i, path in enumerate(paths):
        try:
            full = str(path.resolve())
            full.encode("utf-8")
        except UnicodeEncodeError:
            failed[i] = _failure(path, "bad_request", "the file name is not valid UTF-8: rename the file")
            continue
        except (OSError, RuntimeError) as exc:  # e.g. a symlink loop met while resolving
            failed[i] = _failure(path, "bad_request", str(exc))
            continue
        name = Path(path_text(path)).name or path_text(path)
        documents.append(Document(full, name, title))
    return documents, failed


def _ingest_group(
    args: argparse.Namespace, client: Client, progress: Progress, paths: list[Path], corpus: str, host: str
) -> list[dict[str, Any]]:
    """One group of files through the client's one ingest flow; an entry per file, in order."""
    documents, failed = _documents(paths, args.title)
    answered: list[dict[str, Any]] = []
    if documents:
        try:
            _, answered = client.run(
                lambda c: ingest_files(
                    c,
                    corpus,
                    documents,
                    on=host,
                    language=args.language,
                    metadata=args.metadata,
                    progress=progress.show,
                )
            )
        finally:
            progress.done()  # a failure is printed on a clean line
    given = iter(answered)
    return [failed[i] if i in failed else {"path": path_text(p), **next(given)} for i, p in enumerate(paths)]


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


def _print_entry(args: argparse.Namespace, entry: dict[str, Any]) -> None:
    if args.json:
        return
    name = shown(entry.get("filename") or Path(entry["path"]).name or entry["path"])
    if entry["ok"]:
        note = " (already indexed)" if entry["existing"] else ""
        if entry.get("ocr_pages"):
            note += f", {plural(len(entry['ocr_pages']), 'page')} read by OCR"
        print(f"ok    {name}: {plural(int(entry['chunks_indexed']), 'chunk')}{note}")
        if entry.get("kept"):
            print(f"note  {name}: {shown(kept_text(entry, args))}")
        for a in entry.get("attachments") or []:  # an e-mail's files: documents of their own
            what = plural(int(a["chunks_indexed"]), "chunk") if a["ok"] else f"{a['error']}: {a['message']}"
            print(f"      attached {shown(str(a['filename']))}: {shown(what)}")
    else:
        print(f"FAIL  {name}: {entry['error']}: {shown(entry['message'])}")


def kept_text(entry: dict[str, Any], args: argparse.Namespace) -> str:
    """What a document indexed already kept of its own values, and the command that changes them
    (the values this ingest gave, as given)."""
    kept = entry["kept"]
    old = [f"title {kept['title']!r}"] if "title" in kept else []
    old += [f"{k}={'(none)' if v is None else repr(v)}" for k, v in sorted(kept.get("metadata", {}).items())]
    metas = [m for m in args.meta or () if m.partition("=")[0].partition(":")[0] in kept.get("metadata", {})]
    command = ["hearthnet", "docs", "set", entry["doc_cid"], "--corpus", args.corpus]
    command += [x for m in metas for x in ("--meta", m)]
    command += ["--title", args.title] if "title" in kept else []
    return (
        f"already indexed with {', '.join(old)}: kept (an ingest never changes a stored document); "
        f"to change it, run: {shlex.join(command)}"
    )


SKIPPED_NAMED = 5
"""Skipped files the summary line names (``--json`` lists them all)."""


def _new_corpus(client: Client, corpus: str) -> str | None:
    """A note when no node of the community has held ``corpus`` (a mistyped name makes a new
    corpus), naming the known ones it may have meant; ``None`` if it is known or nobody can tell."""
    if corpus == PERSONAL:
        return None
    try:
        known = client.run(lambda c: RagClient(c).known_corpora(timeout=10))
    except BusError:
        return None
    names = sorted({str(k["name"]) for k in known if isinstance(k.get("name"), str)})
    if corpus in names:
        return None
    note = f"{corpus} is a new corpus: no node of the community held it before"
    close = difflib.get_close_matches(corpus, names, n=3, cutoff=0.75)
    return note + (f" (did you mean {' or '.join(close)}?)" if close else "")


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
        help=f"files ({formats.supported_text()}: {_SUFFIXES}) or folders, walked for those; "
        "names starting with '.' skipped; "
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
