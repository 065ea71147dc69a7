"""Every corpus the community knows of, and where it lives: ``rag.known_corpora@1.0`` (this node only).

Two sources, merged in one place so that every front door (the CLI's
``corpora``, ``query``, ``docs``, ``ingest``; a web UI) and the RAG service's
own checks agree:

* the event log: each ``rag.document.ingested`` event names a corpus, a
  document and its host (the author); a later ``rag.document.deleted`` by the
  same host, or by a current anchor, cancels it (:func:`documents_in_effect`).
  This is what is known of hosts that are offline now.
* the bus: connected hosts advertise ``rag.query`` per corpus, with their
  ``docs`` and ``chunks`` in the params (the live counts).

The service runs on every node, with or without RAG, so a member that runs
no RAG still lists the corpora of hosts that are offline.  "Offline since" is
when this node last saw the host's link go down (:mod:`hearthnet.bus.sightings`).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from hearthnet.bus.api import PeerBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.levels import Level
from hearthnet.community.membership import Membership
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import BEHIND, DELETED, INGESTED, MOVED, REPLICA_OF, validate_corpus_name
from hearthnet.events.envelope import Event
from hearthnet.events.log import EventLog

__all__ = ["RagCatalog", "announced_hosts", "documents_in_effect", "documents_in_log", "effective_ingest"]

DocKey = tuple[str, str, str]
"""``(corpus, doc_cid, host)``."""


def documents_in_effect(events: Iterable[Event], *, is_anchor: Callable[[str], bool]) -> dict[DocKey, Event]:
    """The ingest event in effect for each ``(corpus, doc_cid, host)``.

    ``events`` are the log's effective ingest and delete events in replay
    order.  An ingest puts a document on its author's copy of the corpus; a
    delete takes it off the copy of its author (the host that ran
    ``rag.delete``), or off every copy when its author is an anchor now.  A
    delete cancels only what replays before it, so a document ingested again
    after a delete is in effect again.  A ``rag.corpus.moved`` hands the documents
    on its ``from`` node's copy to its ``to`` node (the corpus's new host).
    """
    held: dict[DocKey, Event] = {}
    hosts: dict[tuple[str, str], set[str]] = {}
    for event in events:
        if event.event_type == MOVED:
            _move(held, hosts, str(event.data["corpus"]), str(event.data["from"]), str(event.data["to"]))
            continue
        corpus, doc_cid = str(event.data["corpus"]), str(event.data["doc_cid"])
        if event.event_type == INGESTED:
            held[(corpus, doc_cid, event.author)] = event
            hosts.setdefault((corpus, doc_cid), set()).add(event.author)
        elif event.event_type == DELETED:
            holders = hosts.get((corpus, doc_cid), set())
            for host in list(holders) if is_anchor(event.author) else [event.author]:
                if held.pop((corpus, doc_cid, host), None) is not None:
                    holders.discard(host)
    return held


def _move(
    held: dict[DocKey, Event], hosts: dict[tuple[str, str], set[str]], corpus: str, old: str, new: str
) -> None:
    """Every document on ``old``'s copy of ``corpus`` is on ``new``'s from here on."""
    for key in [k for k in held if k[0] == corpus and k[2] == old]:
        event = held.pop(key)
        held[(corpus, key[1], new)] = event
        holders = hosts.setdefault((corpus, key[1]), set())
        holders.discard(old)
        holders.add(new)


def documents_in_log(log: EventLog[Membership], author: str | None = None) -> dict[DocKey, Event]:
    """:func:`documents_in_effect` over ``log`` (only ``author``'s ingests if given; blocking: SQLite
    and decoding)."""
    ingests = log.events_of_type(INGESTED, effective_only=True, author=author)
    deletes = log.events_of_type(DELETED, effective_only=True)
    moves = log.events_of_type(MOVED, effective_only=True)
    membership = log.membership()
    return documents_in_effect(
        heapq.merge(ingests, deletes, moves, key=lambda e: e.key),
        is_anchor=lambda node: membership.level_of(node) == Level.ANCHOR,
    )


def effective_ingest(log: EventLog[Membership], corpus: str, doc_cid: str, author: str) -> str | None:
    """The id of ``author``'s ingest event of the document that is in effect (not deleted since)."""
    event = documents_in_log(log, author).get((corpus, doc_cid, author))
    return None if event is None else event.event_id


@dataclass(frozen=True)
class AnnouncedHost:
    """What the event log says one host holds of one corpus."""

    docs: int
    chunks: int
    last_ingest: float
    """Wall-clock seconds of its latest ingest event in effect (the author's own clock)."""


def announced_hosts(
    held: dict[DocKey, Event], is_member: Callable[[str], bool]
) -> dict[str, dict[str, AnnouncedHost]]:
    """``corpus -> host -> AnnouncedHost`` of the documents in effect, for hosts still members."""
    out: dict[str, dict[str, AnnouncedHost]] = {}
    for (corpus, _doc, host), event in held.items():
        if not is_member(host):
            continue  # revoked: its copy is unreachable for good, and nobody should wait for it
        seen = out.setdefault(corpus, {}).get(host, AnnouncedHost(0, 0, 0.0))
        out[corpus][host] = AnnouncedHost(
            seen.docs + 1,
            seen.chunks + int(event.data["chunks"]),
            max(seen.last_ingest, event.wall_clock / 1000),
        )
    return out


class RagCatalog:
    """Serves ``rag.known_corpora@1.0`` on every node (local only)."""

    name = "rag_catalog"

    def __init__(self, *, bus: PeerBus, event_log: EventLog[Membership]) -> None:
        self._bus = bus
        self._log = event_log
        self._limiter = anyio.CapacityLimiter(1)
        self._cache_lock = threading.Lock()
        self._cache: tuple[int, dict[str, dict[str, AnnouncedHost]]] | None = None
        """(events in the log, what they announce): derived again only when the log grew."""

    def registrations(self) -> list[Registration]:
        return [
            Registration(
                CapabilityDescriptor(
                    "rag.known_corpora",
                    (1, 0),
                    max_concurrent=8,
                    timeout_seconds=10.0,
                    idempotent=True,
                    local_only=True,
                    description="corpora known from the event log and the mesh, with their hosts",
                ),
                self._handle,
            )
        ]

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def health(self) -> dict[str, Any]:
        return {}

    def _announced(self) -> dict[str, dict[str, AnnouncedHost]]:
        """Blocking: the announced hosts of every corpus (cached while the log does not grow)."""
        if self._log.community_id is None:
            return {}
        count = self._log.count()
        with self._cache_lock:
            if self._cache is not None and self._cache[0] == count:
                return self._cache[1]
        membership = self._log.membership()
        announced = announced_hosts(documents_in_log(self._log), lambda n: membership.level_of(n) is not None)
        with self._cache_lock:
            self._cache = (count, announced)
        return announced

    async def _handle(self, ctx: CallContext) -> dict[str, Any]:
        check_input_keys(ctx.input, {"corpus"}, "rag.known_corpora")
        wanted = ctx.input.get("corpus")
        if wanted is not None:
            wanted = validate_corpus_name(wanted)
        announced = await anyio.to_thread.run_sync(self._announced, limiter=self._limiter)
        return {"corpora": self.known(announced, wanted)}

    def known(
        self, announced: dict[str, dict[str, AnnouncedHost]], wanted: str | None = None
    ) -> list[dict[str, Any]]:
        """Merge the log's announcements with what hosts advertise now (on the event loop: no I/O)."""
        own = self._bus.node_id
        advertised: dict[str, dict[str, dict[str, Any]]] = {}
        for provider in self._bus.offers("rag.query", (1, 0)):
            d = provider.descriptor
            corpus = d.params.get("corpus")
            if isinstance(corpus, str):
                advertised.setdefault(corpus, {})[provider.node_id] = dict(d.params)
        names = sorted(set(advertised) | set(announced)) if wanted is None else [wanted]
        out = []
        for corpus in names:
            serving = advertised.get(corpus, {})
            heard = announced.get(corpus, {})
            hosts = []
            for node in sorted(set(serving) | set(heard)):
                hosts.append(self._host(node, serving.get(node), heard.get(node), own))
            if not hosts:
                continue
            hosts.sort(
                key=lambda h: (not h["hosting"], h["role"] != "host", h["behind"], -h["chunks"], h["node"])
            )
            out.append(
                {"name": corpus, "hosts": hosts, "duplicate": sum(1 for h in hosts if h["hosting"]) > 1}
            )
        return out

    def _host(
        self, node: str, params: dict[str, Any] | None, heard: AnnouncedHost | None, own: str
    ) -> dict[str, Any]:
        online = node == own or node in self._bus.connected()
        sighting = self._bus.sighting(node)
        docs = heard.docs if heard else 0
        chunks = heard.chunks if heard else 0
        if params is not None:  # what the host says now beats what the log heard
            docs = _count(params.get("docs"), docs)
            chunks = _count(params.get("chunks"), chunks)
        replica_of = params.get(REPLICA_OF) if params is not None else None
        behind = params.get(BEHIND) if params is not None else None
        return {
            "node": node,
            "node_name": self._bus.name if node == own else (sighting.name if sighting else ""),
            "docs": docs,
            "chunks": chunks,
            "online": online,
            "serving": params is not None,
            # an offline host, or one that serves it: a connected host that no longer serves the
            # corpus (its store was wiped, RAG turned off) does not hold the name; a replica holds
            # a copy of its host's, never a name of its own
            "hosting": (params is not None or not online) and not replica_of,
            "role": "replica" if replica_of else "host",
            "replica_of": replica_of if isinstance(replica_of, str) else None,
            "behind": _count(behind, 0) if replica_of else 0,
            "last_seen": None if online or sighting is None else sighting.last_seen,
            "announced_docs": heard.docs if heard else 0,
            "last_ingest": heard.last_ingest if heard else None,
        }


def _count(value: Any, default: int) -> int:
    return value if type(value) is int and value >= 0 else default
