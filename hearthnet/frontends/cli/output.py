"""What every command prints and how it fails: one JSON document with ``--json``, text safe for a
terminal otherwise, progress on stderr for people, and :class:`CliError` for a one-line reason."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hearthnet.bus.context import CallResult

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CliError",
    "Progress",
    "emit",
    "emit_text",
    "jsonable",
    "one_line",
    "path_text",
    "plural",
    "shown",
    "streamed",
    "warn",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report in one line."""


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: bytes as base64, tuples as lists, keys as strings."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def emit(args: argparse.Namespace, document: Any, human: Callable[[], None]) -> None:
    """``document`` as one JSON line with ``--json``, else whatever ``human`` prints."""
    if args.json:
        sys.stdout.write(json.dumps(jsonable(document), ensure_ascii=False) + "\n")
    else:
        human()


def emit_text(args: argparse.Namespace, document: Any, text: str) -> None:
    """:func:`emit` with a ready text for people."""
    emit(args, document, lambda: print(text))


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters as ``\\uXXXX``: a failure is one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def shown(text: str) -> str:
    """``text`` safe for a terminal: control, format and undecodable characters as ``\\u`` escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else f"\\u{ord(ch):04x}" for ch in text)


def path_text(path: Path) -> str:
    """A path as text for output: bytes that are not UTF-8 become U+FFFD (JSON needs valid text)."""
    return os.fsencode(path).decode("utf-8", "replace")


def short_id(node_id: str) -> str:
    """A node id short enough for a line: its key's first characters."""
    _, _, key = node_id.partition(":")
    return (key or node_id)[:12]


def node_label(node_id: str, name: str | None) -> str:
    """A node on a line meant for people: ``name (short id)``, or the short id alone; the name
    made safe for a terminal."""
    return f"{shown(name)} ({short_id(node_id)})" if name else short_id(node_id)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 doc``, ``3 docs``; ``many`` for a word whose plural is not ``word + s``."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def warn(args: argparse.Namespace, warnings: list[str]) -> None:
    """A node's warnings (meta ``warnings``) on stderr; with ``--json`` they are in the document."""
    if args.json:
        return
    for text in warnings:
        print(f"hearthnet: warning: {shown(str(text))}", file=sys.stderr)


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
        note = frame.get("note")  # e.g. "waiting for the embedder (busy)": never a line that stands still
        tail = f"  {shown(str(note))[:40]}" if note else " " * 42
        sys.stderr.write(
            f"\r  {label[:40]:40} {frame.get('stage', ''):6} [{'#' * filled:{width}}] {current}/{total}{tail}"
        )
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 132 + "\r")
            sys.stderr.flush()


def streamed(frames: Iterator[dict[str, Any] | CallResult], progress: Progress, label: str) -> CallResult:
    """The result of a streamed call (``Client.stream``), its frames shown on ``progress``."""
    result: CallResult | None = None
    try:
        for item in frames:
            if isinstance(item, CallResult):
                result = item
            else:
                progress.show(label, item)
    finally:
        progress.done()  # a failure is printed on a clean line
    assert result is not None
    return result
