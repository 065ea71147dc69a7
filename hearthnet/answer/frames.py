"""What the composer sends a front door while it answers: the ``{stage: "answer"}`` frame before
the first words, and the text as :class:`~hearthnet.answer.citations.CitationCheck` lets it through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from hearthnet.answer.citations import CitationCheck
from hearthnet.answer.hits import Hit

__all__ = ["Say", "Send", "announcing", "checking", "rounded", "where"]

Send = Callable[[dict[str, Any]], Awaitable[None]]


def announcing(send: Send, context: Sequence[Hit]) -> Send:
    """``send`` that puts ``{stage: "answer", mode: "generated"}`` before a generated answer's
    first delta (an extractive answer announces itself): a front door then knows what kind of
    answer comes before its first words.  The frame carries ``context``: where each chunk the
    answer may cite is (``chunk_id, file, page, place, anchor, corpus, doc_cid``), so a door can number the
    citations as they stream."""
    announced = False
    citable = [
        {
            "chunk_id": h.chunk_id,
            "file": h.file,
            "page": h.page,
            "place": h.place,
            "anchor": h.anchor,
            "corpus": h.corpus,
            "doc_cid": h.doc_cid,
        }
        for h in context
    ]

    async def sending(frame: dict[str, Any]) -> None:
        nonlocal announced
        if frame.get("stage") == "answer":
            announced = True
            frame = {**frame, "context": citable}
        elif "delta" in frame and not announced:
            announced = True
            await send({"stage": "answer", "mode": "generated", "context": citable})
        await send(frame)

    return sending


def where(sources: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``context`` of an answer frame: where each chunk the answer may cite is."""
    keys = ("chunk_id", "file", "page", "place", "anchor", "corpus", "doc_cid")
    return [{k: s.get(k) for k in keys} for s in sources]


Say = Callable[[str | None], Awaitable[None]]
"""Says a piece of the answer (``None``: the end), its citations checked before it is sent."""


def checking(send: Send, check: CitationCheck) -> Say:
    async def say(text: str | None) -> None:
        shown = check.close() if text is None else check.feed(text)
        if shown:
            await send({"delta": shown})

    return say


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
