"""Which corpora a caller of a front door may search, shared by the gateway and the MCP server.

A caller is the node's owner (the CLI, ``hearthnet mcp`` over stdio) or a person's API key
(member or trusted).  The ``personal`` corpus is the owner's alone: a person naming it is
refused, and "every corpus" for a person leaves it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from hearthnet.bus.context import CallResult
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.services.rag.names import PERSONAL, validate_corpus_name

__all__ = ["MAX_CORPORA", "Calls", "requested_corpora", "searchable_corpora"]

MAX_CORPORA = 64
"""Corpora one question or query may name (``answer.ask``'s own limit)."""


class Calls(Protocol):
    """Capability calls as one caller makes them (its level applied by the front door)."""

    @property
    def owner(self) -> bool:
        """The node's owner, who alone may search ``personal``."""
        ...

    @property
    def key(self) -> str:
        """Whose chats these are: ``owner``, or the API key's token id."""
        ...

    async def call(
        self,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult: ...


def requested_corpora(calls: Calls, names: Sequence[Any]) -> list[str]:
    """Corpus names a caller gave, checked (``bad_request``), ``personal`` refused to a person."""
    if len(names) > MAX_CORPORA:
        raise BadRequest(f"at most {MAX_CORPORA} corpora")
    checked = sorted({validate_corpus_name(c) for c in names})
    if PERSONAL in checked and not calls.owner:
        raise Unauthorized("the personal corpus is the node owner's; this API key cannot search it")
    return checked


async def searchable_corpora(calls: Calls) -> list[str]:
    """Every corpus of the mesh this caller may search (``rag.query`` registrations, from
    ``node.status``), at most ``MAX_CORPORA``."""
    status = (await calls.call("node.status")).output
    names = {
        str(c["params"]["corpus"])
        for c in status.get("capabilities", [])
        if c.get("capability") == "rag.query@1.0" and isinstance((c.get("params") or {}).get("corpus"), str)
    }
    if not calls.owner:
        names.discard(PERSONAL)
    return sorted(names)[:MAX_CORPORA]
