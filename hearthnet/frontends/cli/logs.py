"""``hearthnet logs [-f] [-n N]``: the node's log file, ``<home>/logs/node.log``, and its rotated copies.

Reads the files directly, so it works whether the node runs, stopped or crashed.
Human output is one line per record (time, level, event, then ``key=value``);
``--json`` gives the records as the node wrote them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hearthnet.config import log_path
from hearthnet.errors import BadRequest
from hearthnet.frontends.cli.output import EXIT_INTERRUPTED, CliError, shown
from hearthnet.frontends.client.client import no_home

DEFAULT_LINES = 20
POLL_SECONDS = 0.2
"""How often ``logs -f`` looks for new records and for a rotation, like ``tail -F``."""
_BLOCK = 64 * 1024


def cmd_logs(args: argparse.Namespace) -> None:
    if args.lines < 0:
        raise BadRequest("-n must be 0 or more")
    missing = no_home(args.home)
    if missing is not None and not args.home.exists():  # a home with logs and no key is still read
        raise missing
    path = log_path(args.home)
    try:
        lines, offset, inode = last_lines(path, args.lines)
    except FileNotFoundError:
        if not args.follow:
            raise CliError(f"no log file at {path}: {_why_missing(args.home)}") from None
        lines, offset, inode = [], 0, None
    if not args.follow:
        if args.json:
            document = {"file": str(path), "records": [_record(line) for line in lines]}
            sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
        else:
            _print(args, lines)
        return
    try:
        _print(args, lines)
        for batch in follow(path, offset, inode):
            _print(args, batch)
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None  # Ctrl-C is how `-f` ends: no message


def _why_missing(home: Path) -> str:
    from hearthnet.config import load_config
    from hearthnet.errors import BusError

    try:
        if not load_config(home).log.file:
            return "the log file is off ('[log] file = false' or HEARTHNET_LOG_FILE=0)"
    except BusError:
        pass
    return "no node has run with this home yet"


def _print(args: argparse.Namespace, lines: list[str]) -> None:
    if not lines:
        return
    if args.json:  # following: one record per line (a followed log has no end to close a document at)
        out = "".join(json.dumps(_record(line), ensure_ascii=False) + "\n" for line in lines)
    else:
        out = "".join(render(line) + "\n" for line in lines)
    sys.stdout.write(out)
    sys.stdout.flush()


def _record(line: str) -> Any:
    """A line of the file as a JSON value; a line that is not a JSON object as ``{"unparsed": line}``."""
    try:
        value = json.loads(line)
    except ValueError:
        return {"unparsed": line}
    return value if isinstance(value, dict) else {"unparsed": line}


def render(line: str) -> str:
    """One record for a terminal: ``time level event key=value ...``, then its traceback if any."""
    record = _record(line)
    if "unparsed" in record and len(record) == 1:
        return shown(line)
    record = dict(record)
    head = [str(record.pop(k, "")) for k in ("timestamp", "level", "event")]
    exception = record.pop("exception", None)
    fields = " ".join(f"{k}={_value(v)}" for k, v in record.items())
    text = shown(f"{head[0]} {head[1]:<7} {head[2]} {fields}".rstrip())
    if exception:
        text += "".join("\n    " + shown(t) for t in str(exception).splitlines())
    return text


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c in value for c in ' ="\\'):
        return value
    return json.dumps(value, ensure_ascii=False)


def _rotated(path: Path) -> list[Path]:
    """``node.log.1``, ``node.log.2`` ... that exist, newest first."""
    found = []
    for entry in path.parent.glob(path.name + ".*"):
        suffix = entry.name[len(path.name) + 1 :]
        if suffix.isdigit():
            found.append((int(suffix), entry))
    return [p for _, p in sorted(found)]


def last_lines(path: Path, n: int) -> tuple[list[str], int, int]:
    """The last ``n`` complete records of the log (from the rotated copies too when the current file
    has fewer), oldest first; the offset in ``path`` just after the last complete one, and the
    file's inode (a rotation meanwhile replaces it)."""
    lines, offset, inode = _tail(path, n, complete_only=True)
    for older in _rotated(path):
        if len(lines) >= n:
            break
        try:
            more, _, _ = _tail(older, n - len(lines), complete_only=False)
        except FileNotFoundError:  # rotated away meanwhile
            continue
        lines = more + lines
    return lines, offset, inode


def _tail(path: Path, n: int, *, complete_only: bool) -> tuple[list[str], int, int]:
    """The last ``n`` lines of ``path`` read from its end; ``complete_only`` leaves out a last line
    the writer has not finished."""
    with path.open("rb") as f:
        inode = os.fstat(f.fileno()).st_ino
        end = f.seek(0, os.SEEK_END)
        pos, data = end, b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(_BLOCK, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    cut = data.rfind(b"\n") + 1
    offset = end - (len(data) - cut)
    body = data[:cut] if complete_only else data
    parts = body.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    if pos > 0 and parts:
        parts = parts[1:]  # the first one may be the end of a line that starts before the block
    chosen = parts[-n:] if n else []
    return [p.decode("utf-8", "replace") for p in chosen], offset, inode


def follow(path: Path, offset: int, inode: int | None) -> Iterator[list[str]]:
    """Complete lines appended to ``path`` from ``offset`` on (if it is still the file ``inode``,
    else from its start), batch by batch, for ever.

    Like ``tail -F``: when the file is renamed away (rotation), what was still written to the old
    one is read, then the new file from its start; a truncated file is read again from its start;
    a missing file is waited for.
    """
    f: IO[bytes] | None = None
    pending = b""
    try:
        while True:
            if f is None:
                try:
                    f = path.open("rb")
                except FileNotFoundError:
                    time.sleep(POLL_SECONDS)
                    continue
                st = os.fstat(f.fileno())
                f.seek(
                    offset if st.st_ino == inode and st.st_size >= offset else 0
                )  # else rotated, truncated
                pending = b""
            chunk = f.read(_BLOCK)
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
                if lines:
                    yield [line.decode("utf-8", "replace") for line in lines]
                continue
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or current.st_ino != os.fstat(f.fileno()).st_ino:
                rest = f.read()  # written to the old file after our last read, before the rename
                lines = [line for line in (pending + rest).split(b"\n") if line]
                if lines:
                    yield [line.decode("utf-8", "replace") for line in lines]
                f.close()
                f, inode = None, None
                continue
            if current.st_size < f.tell():  # truncated: start again
                f.seek(0)
                pending = b""
                continue
            time.sleep(POLL_SECONDS)
    finally:
        if f is not None:
            f.close()


def add_logs(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "logs", parents=[common], help="print the node's log file (<home>/logs/node.log); -f follows it"
    )
    p.add_argument(
        "-n",
        dest="lines",
        type=int,
        default=DEFAULT_LINES,
        metavar="N",
        help="print the last N records, from the rotated files too if needed (default: %(default)s)",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="then print new records as they are written, across rotations, until Ctrl-C; "
        "with --json one record per line instead of one document (default: off, print and exit)",
    )
    p.set_defaults(func=cmd_logs)
