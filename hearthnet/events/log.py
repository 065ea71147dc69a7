"""The durable, append-only community event log (SQLite, blocking API).

The node calls it through ``anyio.to_thread.run_sync`` with a limiter; an
internal lock makes every method safe to call from any thread.

Storage vs effect: an event is *stored* (and replicated) when it is signed,
belongs to the community, has valid data, does not equivocate, and its author
passes the monotone admission check at its replay position
(:meth:`EventRules.admit`).  Whether it *takes effect* is decided by replaying
the stored set (:func:`derive_membership`).  Both are functions of the set of
events, so every node holding the same set agrees.
"""

from __future__ import annotations

import heapq
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.community.membership import CREATED, Membership, community_id_for, derive_membership
from hearthnet.errors import BadRequest, BusError, InternalError
from hearthnet.events.envelope import Event, sign_event
from hearthnet.events.gossip import DEFAULT_BATCH, MAX_BATCH, lacking, parse_version_vector
from hearthnet.events.rules import EventRules
from hearthnet.identity.keys import Identity

__all__ = ["EventLog", "IngestReport"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    event_id    TEXT PRIMARY KEY,
    lamport     INTEGER NOT NULL,
    author      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    event_type  TEXT NOT NULL,
    body        BLOB NOT NULL,
    signature   BLOB NOT NULL,
    received_ms INTEGER NOT NULL,
    UNIQUE (author, seq)
);
CREATE INDEX IF NOT EXISTS events_replay ON events (lamport, event_id);
CREATE INDEX IF NOT EXISTS events_by_type ON events (event_type, lamport, event_id);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""
_STORE_VERSION = "1"
_COLS = "body, signature"


@dataclass(frozen=True)
class IngestReport:
    """Outcome of :meth:`EventLog.ingest`; ``rejected`` holds (event_id, error code, reason)."""

    accepted: list[Event] = field(default_factory=list)
    duplicates: int = 0
    rejected: list[tuple[str, str, str]] = field(default_factory=list)


class EventLog:
    """One community's event log in one SQLite file (WAL, synchronous=FULL)."""

    def __init__(self, path: Path, *, rules: EventRules) -> None:
        self._rules = rules
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_version', ?)", (_STORE_VERSION,)
            )
            row = self._db.execute("SELECT value FROM meta WHERE key = 'community_id'").fetchone()
            self._community_id: str | None = None if row is None else str(row[0])
            self._clock = 0
            self._tail: tuple[int, str] | None = None
            self._max_seq: dict[str, int] = {}
            self._contig: dict[str, int] = {}
            self._above: dict[str, set[int]] = {}
            for author, seq in self._db.execute("SELECT author, seq FROM events ORDER BY author, seq"):
                self._note_seq(author, seq)
            tail = self._db.execute(
                "SELECT lamport, event_id FROM events ORDER BY lamport DESC, event_id DESC LIMIT 1"
            ).fetchone()
            if tail is not None:
                self._tail = (int(tail[0]), str(tail[1]))
                self._clock = self._tail[0]
        except BaseException:
            self._db.close()
            raise
        self._membership: Membership | None = None

    # -- community ---------------------------------------------------------
    @property
    def community_id(self) -> str | None:
        return self._community_id

    def set_community(self, community_id: str) -> None:
        """Bind the log to ``community_id`` (once; persisted)."""
        if not isinstance(community_id, str) or not community_id:
            raise BadRequest("community id must be a non-empty string")
        with self._lock:
            if self._community_id == community_id:
                return
            if self._community_id is not None:
                raise BadRequest(f"this log already belongs to community {self._community_id}")
            self._db.execute("INSERT INTO meta (key, value) VALUES ('community_id', ?)", (community_id,))
            self._community_id = community_id
            self._membership = None

    # -- writing -----------------------------------------------------------
    def append_local(self, identity: Identity, event_type: str, data: Mapping[str, Any]) -> Event:
        """Sign and store a local event; raise (``Unauthorized``, ``Revoked``...) if not allowed now.

        A ``community.created`` on an unbound log binds it to the derived id.
        """
        with self._lock:
            community_id = self._community_id
            if community_id is None:
                if event_type != CREATED or not isinstance(data.get("name"), str):
                    raise BadRequest("the log has no community yet: create or join one first")
                community_id = community_id_for(identity.node_id, data["name"])
            event = sign_event(
                identity,
                community_id=community_id,
                event_type=event_type,
                data=data,
                lamport=self._clock + 1,
                seq=self._max_seq.get(identity.node_id, 0) + 1,
            )
            membership = self._current() if self._community_id is not None else Membership(community_id)
            self._rules.check(event, membership)
            if self._community_id is None:
                self.set_community(community_id)
                membership = self._current()
            self._store([event])
            membership.apply(event, self._rules)
            return event

    def ingest(self, events: Sequence[Event]) -> IngestReport:
        """Store events received from peers (already signature-checked by ``Event.from_wire``)."""
        with self._lock:
            rejected: list[tuple[str, str, str]] = []
            duplicates = 0
            if self._community_id is None:
                for ev in events:
                    rejected.append((ev.event_id, BadRequest.code, "the log has no community yet"))
                return IngestReport([], 0, rejected)
            fresh: dict[str, Event] = {}
            for ev in sorted(events, key=lambda e: e.key):
                reason = self._pre_check(ev, fresh)
                if reason == "duplicate":
                    duplicates += 1
                elif reason is not None:
                    rejected.append((ev.event_id, BadRequest.code, reason))
                else:
                    fresh[ev.event_id] = ev
            if not fresh:
                return IngestReport([], duplicates, rejected)
            candidates = list(fresh.values())  # in replay order
            try:
                accepted, membership = self._admit(candidates, rejected)
                self._store(accepted)
            except BaseException:
                self._membership = None
                raise
            self._membership = membership
            return IngestReport(accepted, duplicates, rejected)

    # -- reading -----------------------------------------------------------
    def version_vector(self) -> dict[str, int]:
        """Author -> highest sequence number up to which every event is held."""
        with self._lock:
            return {a: s for a, s in self._contig.items() if s > 0}

    def missing_for(self, remote_vv: Mapping[str, int], *, limit: int = DEFAULT_BATCH) -> list[Event]:
        """Events the peer (with ``remote_vv``) lacks: first ``limit`` in replay order."""
        vv = parse_version_vector(remote_vv)
        limit = max(1, min(int(limit), MAX_BATCH))
        with self._lock:
            starts = lacking(self._max_seq, vv)
            rows: list[tuple[int, str, bytes, bytes]] = []
            for author, first in starts.items():
                rows.extend(
                    self._db.execute(
                        "SELECT lamport, event_id, body, signature FROM events "
                        "WHERE author = ? AND seq >= ? ORDER BY lamport, event_id LIMIT ?",
                        (author, first, limit),
                    )
                )
        rows.sort(key=lambda r: (r[0], r[1]))
        return [Event.from_stored(r[2], r[3]) for r in rows[:limit]]

    def replay(self) -> list[Event]:
        """All stored events in ``(lamport, event_id)`` order."""
        with self._lock:
            return list(self._iter(f"SELECT {_COLS} FROM events ORDER BY lamport, event_id", ()))

    def membership(self) -> Membership:
        """The membership derived from all stored events (a copy; cached internally)."""
        with self._lock:
            return self._current().copy()

    def level_of(self, node_id: str) -> Level | None:
        """A member's current level, without copying the membership (the bus asks on every call)."""
        with self._lock:
            return self._current().level_of(node_id)

    def is_revoked(self, node_id: str) -> bool:
        with self._lock:
            return self._current().is_revoked(node_id)

    def get(self, event_id: str) -> Event | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLS} FROM events WHERE event_id = ?", (event_id,)).fetchone()
        return None if row is None else Event.from_stored(row[0], row[1])

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def events_of_type(self, event_type: str, *, effective_only: bool = False) -> list[Event]:
        """Stored events of one type in replay order; ``effective_only`` drops ignored ones."""
        with self._lock:
            events = list(
                self._iter(
                    f"SELECT {_COLS} FROM events WHERE event_type = ? ORDER BY lamport, event_id",
                    (event_type,),
                )
            )
            if effective_only:
                membership = self._current()
                events = [e for e in events if membership.is_effective(e.event_id)]
            return events

    @property
    def lamport_clock(self) -> int:
        """The highest Lamport time seen; the next local event gets one more."""
        return self._clock

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------
    def _iter(self, sql: str, args: tuple[Any, ...]) -> Iterator[Event]:
        for body, signature in self._db.execute(sql, args).fetchall():
            yield Event.from_stored(body, signature)

    def _current(self) -> Membership:
        if self._membership is None:
            if self._community_id is None:
                raise BadRequest("the log has no community yet")
            self._membership = derive_membership(self._community_id, self.replay(), self._rules)
        return self._membership

    def _pre_check(self, ev: Event, fresh: Mapping[str, Event]) -> str | None:
        """Stateless rejections; ``"duplicate"`` for an event already held."""
        if ev.community_id != self._community_id:
            return "event belongs to another community"
        held = fresh.get(ev.event_id)
        if held is None:
            row = self._db.execute("SELECT body FROM events WHERE event_id = ?", (ev.event_id,)).fetchone()
            if row is not None:
                return "duplicate" if bytes(row[0]) == ev.body else "conflicting body for a known event id"
        elif held.body == ev.body:
            return "duplicate"
        else:
            return "conflicting body for a known event id"
        row = self._db.execute(
            "SELECT event_id FROM events WHERE author = ? AND seq = ?", (ev.author, ev.seq)
        ).fetchone()
        if row is not None or any(f.author == ev.author and f.seq == ev.seq for f in fresh.values()):
            return f"equivocation: {ev.author} already has an event with seq {ev.seq}"
        return None

    def _admit(
        self, candidates: list[Event], rejected: list[tuple[str, str, str]]
    ) -> tuple[list[Event], Membership]:
        """Check candidates (replay order) at their positions; return accepted + new membership."""
        assert self._community_id is not None
        first = candidates[0].key
        if self._tail is None or first > self._tail:
            membership = self._current().copy()
            stored: Iterable[Event] = ()
        else:  # some land inside the stored history: replay prefix, then merge-walk the suffix
            membership = derive_membership(
                self._community_id,
                self._iter(
                    f"SELECT {_COLS} FROM events WHERE (lamport, event_id) < (?, ?) "
                    "ORDER BY lamport, event_id",
                    first,
                ),
                self._rules,
            )
            stored = self._iter(
                f"SELECT {_COLS} FROM events WHERE (lamport, event_id) > (?, ?) ORDER BY lamport, event_id",
                first,
            )
        accepted: list[Event] = []
        tagged = heapq.merge(
            ((e.key, 0, e) for e in stored), ((e.key, 1, e) for e in candidates), key=lambda t: t[0]
        )
        for _key, is_new, ev in tagged:
            if is_new:
                try:
                    self._rules.admit(ev, membership)
                except BusError as exc:
                    rejected.append((ev.event_id, exc.code, exc.message))
                    continue
                accepted.append(ev)
            membership.apply(ev, self._rules)
        return accepted, membership

    def _store(self, events: Sequence[Event]) -> None:
        if not events:
            return
        now = time.time_ns() // 1_000_000
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO events (event_id, lamport, author, seq, event_type, body, signature, "
                "received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (e.event_id, e.lamport, e.author, e.seq, e.event_type, e.body, e.signature, now)
                    for e in events
                ],
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK")
            raise InternalError(f"event log write failed: {type(exc).__name__}") from exc
        for e in events:
            self._note_seq(e.author, e.seq)
            self._clock = max(self._clock, e.lamport)
            if self._tail is None or e.key > self._tail:
                self._tail = e.key

    def _note_seq(self, author: str, seq: int) -> None:
        self._max_seq[author] = max(self._max_seq.get(author, 0), seq)
        contig = self._contig.get(author, 0)
        if seq != contig + 1:
            self._above.setdefault(author, set()).add(seq)
            return
        contig = seq
        above = self._above.get(author)
        while above and contig + 1 in above:
            contig += 1
            above.discard(contig)
        self._contig[author] = contig
