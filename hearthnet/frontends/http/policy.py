"""Who may do what through the node's HTTP server: the allow-list of capabilities, each with the
level it needs (the capability's own, from the contracts).

The web UI, the OpenAI-compatible gateway and the MCP server call the node's bus in-process,
where every call runs as the node itself (anchor on its own services).  This allow-list is
therefore the security boundary between a person's login or API key and the node: a capability
that is not listed is never called, and one that is listed is called only by a login or key of
at least its level.  The node's owner is the only anchor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

from hearthnet.bus.api import BusAPI, CallStream
from hearthnet.bus.context import CallResult
from hearthnet.community.levels import Level
from hearthnet.contracts import answer, embed, file, folders, llm, node, rag, rerank
from hearthnet.contracts.levels import trust_required
from hearthnet.errors import BusError, Unauthorized

__all__ = ["CAPABILITY_LEVELS", "ERROR_STATUS", "HTTP_CALLABLE", "GatedBus", "LoginBus", "http_status"]

HTTP_CALLABLE: Final[frozenset[str]] = frozenset(
    {
        # reading the mesh
        node.INFO,
        node.STATUS,
        node.STATS,
        node.EVENTS_LIST,
        node.MEMBERS,
        # reading documents
        rag.LIST_CORPORA,
        rag.KNOWN_CORPORA,
        rag.LIST_DOCUMENTS,
        rag.QUERY,
        rag.GET,  # the ChromaDB door's get
        file.LIST,
        file.FETCH,  # copies a cited blob into this node's cache to show it
        file.READ,
        # asking (the gateway and MCP too)
        embed.CAPABILITY,
        llm.CAPABILITY,
        rerank.CAPABILITY,  # TEI's /rerank
        rag.SEARCH_ARCHIVES,  # asks only the ChromaDB servers the node's allow-list names
        answer.ASK,
        answer.SESSIONS,
        answer.SESSION_GET,
        answer.SESSION_RENAME,
        answer.SESSION_DELETE,
        answer.ATTACH,  # a document for one chat of the login (never a corpus)
        # changing the corpora
        file.IMPORT,
        file.PUSH,
        rag.INGEST,
        rag.DELETE,
        folders.WATCH,  # the Library's watched folders (the owner's: anchor)
        # changing the community
        node.INVITE,
        node.MEMBER_PROMOTE,
        node.MEMBER_DEMOTE,
        node.MEMBER_REVOKE,
    }
)
"""Every capability the HTTP front doors may call."""
CAPABILITY_LEVELS: Final[Mapping[str, Level]] = {name: trust_required(name) for name in sorted(HTTP_CALLABLE)}
"""Each of them with the lowest login or key level that may call it: the level the capability
itself needs (:mod:`hearthnet.contracts.levels`, its descriptors' ``trust_required``)."""


def check(level: Level, capability: str) -> None:
    """``Unauthorized`` unless a login of ``level`` may call ``capability`` through the UI."""
    needed = CAPABILITY_LEVELS.get(capability)
    if needed is None:
        raise Unauthorized(f"the node's HTTP server does not call {capability}")
    if level < needed:
        article = "an" if needed.label[0] in "aeiou" else "a"
        raise Unauthorized(f"{capability} needs {article} {needed.label} login; this one is {level.label}")


def allowed(level: Level, capability: str) -> bool:
    needed = CAPABILITY_LEVELS.get(capability)
    return needed is not None and level >= needed


class GatedBus:
    """The node's bus as one login may use it: every call is checked against the allow-list first."""

    def __init__(self, bus: BusAPI) -> None:
        self.bus = bus

    @property
    def node_id(self) -> str:
        return self.bus.node_id

    def login(self, level: Level) -> LoginBus:
        """This bus as a login of ``level`` calls it (what the front doors' shared policy asks through)."""
        return LoginBus(self, level)

    async def call(
        self,
        level: Level,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult:
        check(level, capability)
        return await self.bus.call(
            capability, (1, 0), params=params, input=input, timeout=timeout, provider=provider
        )

    @asynccontextmanager
    async def stream(
        self,
        level: Level,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> AsyncIterator[CallStream]:
        check(level, capability)
        async with self.bus.stream(
            capability, (1, 0), params=params, input=input, timeout=timeout, provider=provider
        ) as call:
            yield call


class LoginBus:
    """A :class:`GatedBus` bound to one login's level: a ``Caller`` (``StreamCaller``) of the
    contracts' typed clients and of :mod:`hearthnet.frontends.client.corpora`."""

    def __init__(self, gated: GatedBus, level: Level) -> None:
        self._gated = gated
        self._level = level

    async def call(self, capability: str, **call: Any) -> CallResult:
        """``capability`` (``call``: its params, input, timeout, provider) at this login's level."""
        return await self._gated.call(self._level, capability, **call)

    def stream(self, capability: str, **call: Any) -> AbstractAsyncContextManager[CallStream]:
        return self._gated.stream(self._level, capability, **call)


ERROR_STATUS: Final[Mapping[str, int]] = {
    "bad_request": 400,
    "schema_mismatch": 400,
    "unauthorized": 403,
    "revoked": 403,
    "not_found": 404,
    "not_implemented": 501,
    "timeout": 504,
    "partition": 503,
    "capacity_exceeded": 503,
    "rate_limited": 429,
    "invalid_signature": 502,
    "expired": 410,
    "internal_error": 500,
}
"""The HTTP status each bus error code is answered with by the UI's API (the program doors start
from it: :data:`.gateway_answers.STATUS`)."""


def http_status(error: BusError) -> int:
    """The HTTP status a bus error is answered with."""
    return ERROR_STATUS.get(error.code, 500)
