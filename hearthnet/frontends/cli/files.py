"""``file put|get|ls``: content-addressed blobs, through the running node."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hearthnet.contracts.file import FileClient
from hearthnet.errors import BadRequest
from hearthnet.frontends.cli.output import Progress, emit_text, path_text, shown, streamed
from hearthnet.frontends.client.client import Client

__all__ = ["add_file", "node_path"]


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
        imported = client.run(lambda c: FileClient(c).import_file(path))
        emit_text(args, {**imported, "pushed_to": None, "push": None}, imported["doc_cid"])
        return
    # One call: the node imports, pushes, and pins only if the push succeeded; a refused
    # push leaves nothing here that the import created.
    frames = client.streamed(lambda c: FileClient(c).pushing(args.on, path=path))
    pushed = dict(streamed(frames, Progress(not args.json), Path(path).name).output)
    imported = pushed.pop("imported")
    emit_text(args, {**imported, "pushed_to": args.on, "push": pushed}, imported["doc_cid"])


def cmd_file_get(args: argparse.Namespace) -> None:
    from hearthnet.blobs.destination import check_destination, destination_path

    out = node_path(args.out, "output path", "choose a UTF-8 name")
    check_destination(destination_path(out), force=args.force)  # before a long fetch; export checks again
    client = Client(args.home)
    frames = client.streamed(lambda c: FileClient(c).fetching(args.cid))
    fetched = streamed(frames, Progress(not args.json), args.cid).output
    exported = client.run(lambda c: FileClient(c).export(args.cid, out, force=args.force))
    emit_text(
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
        page = client.run(lambda c: FileClient(c).list(prefix=args.prefix or "", after=after))  # noqa: B023 (run at once)
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
    emit_text(args, {"blobs": blobs, "truncated": truncated}, "\n".join(lines) if lines else "(no blobs)")


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


def add_file(sub: Any, common: argparse.ArgumentParser) -> None:
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
