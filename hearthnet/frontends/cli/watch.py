"""``hearthnet watch add DIR --corpus C | list | remove DIR``: folders the node keeps indexed
(``specs/folders.md``)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from hearthnet.contracts.folders import FolderClient
from hearthnet.frontends.cli.args import corpus_arg
from hearthnet.frontends.cli.output import Progress, emit, emit_text, plural, shown
from hearthnet.frontends.client.client import AsyncClient

__all__ = ["add_watch", "folder_lines"]

T = TypeVar("T")
FOLLOW_SECONDS = 0.5
"""How often ``watch add --wait`` asks for the folder's progress."""


def _folders(args: argparse.Namespace, ask: Callable[[FolderClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with AsyncClient(args.home) as client:
            return await ask(FolderClient(client))

    return anyio.run(run)


def _abs(path: str) -> str:
    """A folder as the node must be told it: absolute (the node does not share our working folder)."""
    return os.path.abspath(os.path.expanduser(path))


def cmd_add(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    path = _abs(args.dir)
    out = _folders(args, lambda f: f.add(path, corpus))
    if not args.wait:
        said = (
            f"watching {shown(out['path'])} into corpus {corpus}: the first scan runs in the background "
            "('hearthnet watch list' shows its progress)"
            if out.get("added")
            else f"already watching {shown(out['path'])} into corpus {corpus} "
            "('hearthnet watch list' shows its state)"
        )
        emit_text(args, out, said)
        return
    entry = _follow(args, str(out["path"]))
    emit_text(args, entry, "\n".join(folder_lines([entry])))


def _follow(args: argparse.Namespace, path: str) -> dict[str, Any]:
    """The folder's progress on one line until its first scan is done (Ctrl-C leaves it running)."""
    progress = Progress(not args.json)

    async def run() -> dict[str, Any]:
        async with AsyncClient(args.home) as client:
            while True:
                entry = next(f for f in await FolderClient(client).list() if f["path"] == path)
                scan = entry.get("scan") or {}
                frame = {"stage": "scan", "current": scan.get("current", 0), "total": scan.get("total", 0)}
                progress.show(os.path.basename(path) or path, frame)
                if entry["state"] != "scanning" and not entry["pending"]:
                    return entry
                if entry["state"] in ("refused", "missing"):
                    return entry
                await anyio.sleep(FOLLOW_SECONDS)

    try:
        return anyio.run(run)
    finally:
        progress.done()


def cmd_remove(args: argparse.Namespace) -> None:
    path = _abs(args.dir)
    out = _folders(args, lambda f: f.remove(path))
    emit_text(
        args, out, f"no longer watching {shown(out['path'])} (its documents stay in corpus {out['corpus']})"
    )


def cmd_list(args: argparse.Namespace) -> None:
    folders = _folders(args, lambda f: f.list())
    emit(args, {"folders": folders}, lambda: print("\n".join(folder_lines(folders)) or "no watched folders"))


def folder_lines(folders: list[dict[str, Any]]) -> list[str]:
    """Each folder: its corpus and state, indexed / pending / failed, last change, each failure's reason."""
    lines = []
    for f in folders:
        state = str(f.get("state", ""))
        scan = f.get("scan")
        if scan:
            state += f" {scan['current']}/{scan['total']}"
        when = f.get("last_change")
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "never"
        config = " (config.toml)" if f.get("from_config") else ""
        lines.append(
            f"{shown(f['path'])} -> {f['corpus']}{config}: {state}; {f['indexed']} indexed, "
            f"{f['pending']} pending, {plural(int(f.get('failed_count', 0)), 'failed file')}; "
            f"last change {last}"
        )
        if f.get("reason"):
            lines.append(f"  {shown(str(f['reason']))}")
        for bad in f.get("failed", []):
            lines.append(f"  failed: {shown(bad['path'])}: {shown(bad['reason'])}")
    return lines


def add_watch(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="folders the node keeps indexed: add, list, remove")
    wsub = p.add_subparsers(dest="watch_command", required=True, metavar="ACTION")
    a = wsub.add_parser(
        "add",
        parents=[common],
        help="keep a folder on the node's disk indexed in a corpus (new, changed, renamed, deleted files)",
    )
    a.add_argument("dir", metavar="DIR", help="the folder (on the node's disk)")
    a.add_argument("--corpus", required=True, help="the corpus its documents go to (required)")
    a.add_argument(
        "--wait",
        action="store_true",
        help="show the first scan's progress until it is done (default: answer at once)",
    )
    a.set_defaults(func=cmd_add)
    lst = wsub.add_parser(
        "list", parents=[common], help="watched folders: indexed, pending, failed (with reasons)"
    )
    lst.set_defaults(func=cmd_list)
    r = wsub.add_parser("remove", parents=[common], help="stop watching a folder (its documents stay)")
    r.add_argument("dir", metavar="DIR", help="the watched folder")
    r.set_defaults(func=cmd_remove)
