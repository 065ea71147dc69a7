"""What the signed log says a replica of a corpus must hold: the corpus's host now, and the documents
in effect on its copy, in log order (pure over the events; :func:`corpus_view` reads them from a log).

The host is the author of the corpus's first ingest, until an anchor's ``rag.corpus.moved`` names
another.  The documents are :func:`~hearthnet.services.rag.catalog.documents_in_effect` of that host,
each with the host's latest ``rag.document.updated`` of it since its ingest (its title and metadata):
a delete applies whether it arrives before or after the ingest it cancels (a state is derived from the
whole log, not applied event by event), and a replica that was off derives the same state on return.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from hearthnet.community.levels import Level
from hearthnet.community.membership import Membership
from hearthnet.contracts.rag import DELETED, INGESTED, MOVED, UPDATED
from hearthnet.events.envelope import Event
from hearthnet.events.log import EventLog
from hearthnet.services.rag.catalog import documents_in_effect
from hearthnet.services.rag.replicas.export import IngestFacts, UpdateFacts

__all__ = ["CorpusView", "ReadView", "corpus_host", "corpus_view", "view_of"]


@dataclass(frozen=True)
class CorpusView:
    """A corpus as the log has it: its host (``None``: no document announced yet), the documents in
    effect on the host's copy in log order, and the nodes it was moved away from."""

    corpus: str
    host: str | None
    documents: tuple[IngestFacts, ...]
    moved_from: frozenset[str]


ReadView = Callable[[str], CorpusView]
"""``corpus -> CorpusView`` (blocking: reads the log)."""


def corpus_host(events: Iterable[Event], corpus: str) -> tuple[str | None, frozenset[str]]:
    """The host of ``corpus`` after ``events`` (replay order), and every node it moved away from."""
    host: str | None = None
    left: set[str] = set()
    for event in events:
        if event.data.get("corpus") != corpus:
            continue
        if event.event_type == MOVED:
            left.add(str(event.data["from"]))
            host = str(event.data["to"])
            left.discard(host)
        elif event.event_type == INGESTED and host is None:
            host = event.author
    return host, frozenset(left)


def view_of(events: list[Event], corpus: str, *, is_anchor: Callable[[str], bool]) -> CorpusView:
    """:class:`CorpusView` of ``corpus`` from ``events`` (ingests, deletes and moves in replay order)."""
    mine = [e for e in events if e.data.get("corpus") == corpus]
    host, left = corpus_host(mine, corpus)
    held = documents_in_effect(mine, is_anchor=is_anchor)
    docs = sorted(
        (
            (event.key, _updated(IngestFacts.of(event.data, event.author), event, mine, host))
            for (_, _, h), event in held.items()
            if h == host
        ),
        key=lambda kv: kv[0],
    )
    return CorpusView(corpus, host, tuple(f for _, f in docs), left)


def _updated(facts: IngestFacts, ingest: Event, events: list[Event], host: str | None) -> IngestFacts:
    """``facts`` with the latest update of its document after ``ingest``, by the corpus's host or
    the ingest's author (an update by anyone else changes no copy)."""
    latest: Event | None = None
    name: str | None = None  # only an update that renamed it carries the file name
    for event in events:  # replay order: the last one wins
        if (
            event.event_type == UPDATED
            and event.data.get("doc_cid") == facts.doc_cid
            and event.key > ingest.key
            and event.author in (host, ingest.author)
        ):
            latest = event
            name = UpdateFacts.of(event.data).filename or name
    if latest is None:
        return facts
    return replace(facts, updated=replace(UpdateFacts.of(latest.data), filename=name))


def corpus_view(log: EventLog[Membership], corpus: str) -> CorpusView:
    """:func:`view_of` over ``log``'s effective events (blocking: SQLite and decoding); nothing before
    the node is in a community."""
    if log.community_id is None:
        return CorpusView(corpus, None, (), frozenset())
    kinds = [log.events_of_type(t, effective_only=True) for t in (INGESTED, DELETED, MOVED, UPDATED)]
    membership = log.membership()
    return view_of(
        list(heapq.merge(*kinds, key=lambda e: e.key)),
        corpus,
        is_anchor=lambda node: membership.level_of(node) == Level.ANCHOR,
    )
