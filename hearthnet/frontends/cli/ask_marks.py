"""``hearthnet ask``'s citation markers, numbered like its sources: ``[file#chunk_id]`` becomes
``[1]``, the number of the source line of the chunk's document page.

The node has checked every marker against the answer's context before sending it (``specs/answer.md``);
the ``{stage: "answer"}`` frame says where each chunk of that context is, so the numbers are given
as the text streams, in the order the sources are printed (cited pages first, in the order of
their first citation).  A bracket of numbers that is no citation (``[2]`` in a model's text) is
shown in parentheses, so it cannot be taken for a source's number.  ``--json`` keeps the ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from hearthnet.contracts.markers import Brackets, Span, marker_ids

__all__ = ["Numbered", "source_key"]

_NUMBERS = re.compile(r"\s*\d+(\s*[,;\-\u2013]\s*\d+)*\s*")


def source_key(source: Mapping[str, Any]) -> tuple[str, object, str]:
    """The document page a source line stands for: passages with one key share a line."""
    doc = str(
        source.get("doc_cid") or source.get("file") or source.get("title") or source.get("chunk_id") or ""
    )
    return doc, source.get("page"), str(source.get("corpus", ""))


class Numbered:
    """Feed an answer's deltas; get them back with each marker as its source numbers."""

    def __init__(self) -> None:
        self._brackets = Brackets()
        self._where: dict[str, tuple[str, object, str]] = {}
        self._numbers: dict[tuple[str, object, str], int] = {}

    def context(self, chunks: Iterable[Any]) -> None:
        """Where the chunks the answer may cite are (the ``{stage: "answer"}`` frame's ``context``)."""
        for chunk in chunks:
            if isinstance(chunk, Mapping) and isinstance(chunk.get("chunk_id"), str):
                self._where[chunk["chunk_id"].lower()] = source_key(chunk)

    def feed(self, delta: str) -> str:
        return "".join(self._text(p) for p in self._brackets.feed(delta))

    def close(self) -> str:
        return "".join(self._text(p) for p in self._brackets.close())

    def _text(self, piece: str | Span) -> str:
        if isinstance(piece, str):
            return piece
        if not piece.is_marker:
            if piece.closed and _NUMBERS.fullmatch(piece.inner):
                return f"{piece.lead}({piece.inner})"
            return piece.text
        numbers: list[int] = []
        for chunk in marker_ids(piece.inner):
            key = self._where.get(chunk.lower()) if piece.closed else None
            if key is None:
                continue  # the node sends only checked markers: one it cannot place is not shown
            n = self._numbers.setdefault(key, len(self._numbers) + 1)
            if n not in numbers:
                numbers.append(n)
        return f"{piece.lead}[{', '.join(map(str, numbers))}]" if numbers else ""
