"""Where corpora live, the rules every front door follows: which node hosts a corpus (and takes a
new document), whom to ask about one, what to say when none answers, every corpus in the mesh, and
which of them a caller of the gateway or MCP may search (``personal`` is the node owner's alone:
a person naming it is refused, and "every corpus" for a person leaves it out).

Written against :class:`~hearthnet.contracts.base.Caller`, what the control-socket client
(:class:`AsyncClient`) and the node's bus (the web UI's) both are, so the CLI and the web UI
share one policy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import anyio

from hearthnet.contracts.answer import MAX_CORPORA
from hearthnet.contracts.base import Caller
from hearthnet.contracts.node import NodeClient, offers
from hearthnet.contracts.rag import (
    INGEST,
    LIST_CORPORA,
    PERSONAL,
    QUERY,
    SYSTEM,
    RagClient,
    host_label,
    validate_corpus_name,
)
from hearthnet.errors import BadRequest, BusError, NotFound, Partition, Revoked, Unauthorized

__all__ = [
    "MAX_CORPORA",
    "Calls",
    "check_may_ingest",
    "corpus_host",
    "explain_unreachable",
    "hosted_here_or_there",
    "ingest_host",
    "known_hosts",
    "list_corpora_of",
    "not_held_by",
    "rag_hosts",
    "requested_corpora",
    "revoked_error",
    "searchable_corpora",
    "seen_text",
    "since_text",
]


def seen_text(host: Mapping[str, Any]) -> str:
    """``offline since <when> (<how long> ago)``, or ``not connected`` when unknown."""
    last = host.get("last_seen")
    if not isinstance(last, int | float):
        return "not connected"
    when, span = _since(float(last))
    return f"offline since {when} ({span} ago)"


def since_text(last: float) -> str:
    """``<when>, <how long> ago`` for a wall-clock time (when a host was last seen)."""
    when, span = _since(last)
    return f"{when}, {span} ago"


def _since(last: float) -> tuple[str, str]:
    ago = max(0.0, time.time() - last)
    if ago < 120:
        span = f"{ago:.0f} s"
    elif ago < 7200:
        span = f"{ago / 60:.0f} min"
    elif ago < 172800:
        span = f"{ago / 3600:.0f} h"
    else:
        span = f"{ago / 86400:.0f} days"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(last)), span


def label(host: Mapping[str, Any]) -> str:
    return host_label(str(host["node"]), host.get("node_name"))


def revoked_error(status: Mapping[str, Any]) -> Revoked | None:
    """What to tell a user of a node that knows it was revoked (``node.status``'s ``revoked``):
    every call that needs another member fails, and not for the reason the call itself sees
    (no provider, a host "offline"); ``None`` for a node in good standing."""
    revoked = status.get("revoked")
    if not isinstance(revoked, Mapping):
        return None
    return Revoked(
        f"this node was revoked from the community by {revoked.get('by')} at {revoked.get('at')}: "
        "it can no longer reach other members ('hearthnet status' shows the revocation)"
    )


def check_may_ingest(status: Mapping[str, Any], corpus: str) -> None:
    """Refuse, before any file is copied, an ingest this node cannot make: a corpus other than
    ``personal`` takes documents only from a trusted member (the node signs the announcement and
    pushes the file), and a revoked node reaches nobody."""
    if corpus == PERSONAL:
        return
    revoked = revoked_error(status)
    if revoked is not None:
        raise revoked
    if status.get("level") == "member":
        own = status.get("node_id")
        raise Unauthorized(
            f"ingesting into corpus {corpus} needs a trusted member: this node is only a member "
            f"(ask an anchor to promote it: 'hearthnet member promote {own} --level trusted')"
        )


def corpus_host(status: Mapping[str, Any], corpus: str, on: str | None, hosts: list[dict[str, Any]]) -> str:
    """Where to ingest into ``corpus``: its host (the largest copy if a name was given twice), else
    ``on``, this node, or any node accepting new corpora.

    ``status`` is this node's ``node.status``; ``hosts`` the corpus's hosting entries of
    ``rag.known_corpora`` (offline ones included).  A corpus name is one corpus in the
    community: ``on`` naming another node than the corpus's host, or a host that is offline,
    is refused before any file is copied, and so is an archive (read-only).  The personal corpus
    always stays on this node.
    """
    own = str(status["node_id"])
    check_may_ingest(status, corpus)
    if corpus == PERSONAL:
        if on and on != own:
            raise BadRequest("the personal corpus stays on this node: --on cannot name another node")
        return own  # never push a personal document to a peer, whatever it advertises
    caps = status["capabilities"]
    archive = next(
        (
            c
            for c in caps
            if offers(c, QUERY)
            and (c.get("params") or {}).get("corpus") == corpus
            and (c.get("params") or {}).get("read_only") is True
        ),
        None,
    )
    if archive is not None:  # refused here, before a file is copied (the host refuses it too)
        raise BadRequest(
            f"corpus {corpus} is an archive served read-only by node {archive['node']} (ChromaDB "
            f"collection {archive['params'].get('collection_name')}): nothing can be ingested into it"
        )
    if on and on != own and not any(c["node"] == on and offers(c, INGEST) for c in caps):
        raise NotFound(
            f"node {on} does not offer rag.ingest to this node (not connected, or not running rag): "
            "see 'hearthnet status'"
        )
    if hosts:
        if on is not None and on in {h["node"] for h in hosts}:
            return on
        serving = [h for h in hosts if h["serving"]]
        if on is None and serving:
            return str(max(serving, key=lambda h: (h["chunks"], h["node"] == own))["node"])
        host = (serving or hosts)[0]
        state = "" if host["serving"] else f", which is {seen_text(host)}"
        raise BadRequest(
            f"corpus {corpus} already exists on node {host_label(host['node'], host.get('node_name'))}"
            f"{state}: a corpus name is one corpus in the community; ingest into it there"
            + (f" (--on {host['node']})" if host["serving"] else " when it is back")
            + " or choose another name"
        )
    if on:
        return on
    ingesters = [c for c in caps if offers(c, INGEST)]
    if any(c["node"] == own for c in ingesters):
        return own
    accepting = [c["node"] for c in ingesters if c["params"].get("accepts_new")]
    if accepting:
        return str(accepting[0])
    raise NotFound(
        f"no node in the mesh hosts corpus {corpus} or accepts new corpora (is any node running rag?)"
    )


async def known_hosts(caller: Caller, corpus: str) -> list[dict[str, Any]]:
    """The hosts of ``corpus`` this node knows of (``rag.known_corpora``), preferred first; those
    online and no longer serving it are left out.  Empty if none, or if the node cannot tell."""
    return await RagClient(caller).hosts_of(corpus)


async def ingest_host(caller: Caller, corpus: str, on: str | None) -> str:
    """:func:`corpus_host` asked of the node ``caller`` reaches."""
    status = await NodeClient(caller).status()
    return corpus_host(status, corpus, on, await known_hosts(caller, corpus))


async def explain_unreachable(caller: Caller, corpus: str, exc: BusError) -> BusError:
    """What to tell a user whose call about ``corpus`` failed with ``exc`` (``not_found``/``partition``).

    This node revoked: that is why (it reaches no member).  No host known anywhere: "no corpus
    'x'" (``system`` is reserved and read-only: nothing can put a document in it); every host
    offline: which and since when.  Otherwise a host is up and its own error (a model to reindex,
    an embedder gone) is the one to show.
    """
    revoked = revoked_error(await NodeClient(caller).status())
    if revoked is not None:
        return revoked
    hosts = await known_hosts(caller, corpus)
    if not hosts and corpus == SYSTEM:
        return NotFound(
            "corpus system is the reserved, read-only system corpus: no node of this mesh holds "
            "documents in it ('hearthnet corpora' lists the corpora)"
        )
    if not hosts:
        return NotFound(f"no corpus {corpus!r}; `hearthnet corpora` lists them")
    if any(h["serving"] for h in hosts):
        return exc
    where = " and ".join(f"{label(h)}, which is {seen_text(h)}" for h in hosts)
    return Partition(f"corpus {corpus!r} is hosted on {where}")


async def not_held_by(caller: Caller, corpus: str, node: str, exc: BusError) -> BusError:
    """What to tell a user who asked ``node`` (``--on``) about ``corpus`` and got ``exc``: if that
    node does not hold it, say so and name the corpus's hosts; else :func:`explain_unreachable`."""
    if not isinstance(exc, NotFound):
        return await explain_unreachable(caller, corpus, exc)
    status = await NodeClient(caller).status()
    revoked = revoked_error(status)
    if revoked is not None:
        return revoked
    hosts = await known_hosts(caller, corpus)
    if not hosts or node in {str(h["node"]) for h in hosts}:
        return await explain_unreachable(caller, corpus, exc)
    names = {str(p["node_id"]): str(p.get("name") or "") for p in status.get("peers", [])}
    names[str(status["node_id"])] = str(status.get("name") or "")
    where = " and ".join(label(h) for h in hosts)
    return NotFound(
        f"node {host_label(node, names.get(node))} does not hold corpus {corpus}: it is hosted on {where}"
    )


async def hosted_here_or_there(caller: Caller, corpus: str, on: str | None) -> list[str]:
    """The nodes to ask about ``corpus``, preferred first (``on`` alone if given)."""
    if on:
        return [on]
    hosts = await known_hosts(caller, corpus)
    serving = [str(h["node"]) for h in hosts if h["serving"]]
    if serving:
        return serving
    raise await explain_unreachable(caller, corpus, NotFound(f"no corpus {corpus!r}"))


def rag_hosts(status: Mapping[str, Any]) -> list[str]:
    """The nodes of a ``node.status`` that answer ``rag.list_corpora``, sorted."""
    return sorted({c["node"] for c in status["capabilities"] if offers(c, LIST_CORPORA)})


async def list_corpora_of(
    caller: Caller, nodes: list[str], *, timeout: float
) -> list[tuple[str, list[dict[str, Any]] | BusError]]:
    """Every node's ``rag.list_corpora`` corpora (or error), asked at the same time, in ``nodes`` order."""
    answers: dict[str, list[dict[str, Any]] | BusError] = {}
    limit = anyio.CapacityLimiter(16)
    rag = RagClient(caller)

    async def ask(node: str) -> None:
        async with limit:
            try:
                answers[node] = await rag.list_corpora(node, timeout=timeout)
            except BusError as exc:
                answers[node] = exc

    async with anyio.create_task_group() as tg:
        for node in nodes:
            tg.start_soon(ask, node)
    return [(node, answers[node]) for node in nodes]


# -- what a caller of the gateway or MCP may search ------------------------------------------
class Calls(Caller, Protocol):
    """Capability calls as one caller of the gateway or MCP makes them (its level applied by the
    front door)."""

    @property
    def owner(self) -> bool:
        """The node's owner, who alone may search ``personal``."""
        ...

    @property
    def key(self) -> str:
        """Whose chats these are: ``owner``, or the API key's token id."""
        ...


def requested_corpora(calls: Calls, names: Sequence[Any]) -> list[str]:
    """Corpus names a caller gave, checked (``bad_request``), ``personal`` refused to a person."""
    if len(names) > MAX_CORPORA:
        raise BadRequest(f"at most {MAX_CORPORA} corpora")
    checked = sorted({validate_corpus_name(c) for c in names})
    if PERSONAL in checked and not calls.owner:
        raise Unauthorized("the personal corpus is the node owner's: only the owner may search it")
    return checked


async def searchable_corpora(calls: Calls) -> list[str]:
    """Every corpus of the mesh this caller may search (``rag.query`` registrations, from
    ``node.status``), at most ``MAX_CORPORA``."""
    status = await NodeClient(calls).status()
    names = {
        str(c["params"]["corpus"])
        for c in status.get("capabilities", [])
        if offers(c, QUERY) and isinstance((c.get("params") or {}).get("corpus"), str)
    }
    if not calls.owner:
        names.discard(PERSONAL)
    return sorted(names)[:MAX_CORPORA]
