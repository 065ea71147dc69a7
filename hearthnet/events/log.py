"""The durable, append-only community event log (SQLite, blocking API).

The node calls it through ``anyio.to_thread.run_sync`` with a limiter; an
internal lock makes every method safe to call from any thread.

Storage vs effect: an event is *stored* (and replicated) when it is signed,
belongs to the community, has valid data, does not equivocate, its author
passes the monotone admission check at its replay position
(:meth:`EventRules.admit`), and it continues the author's stored events
without a gap (seq = held + 1, replaying after its predecessor).  Whether it
*takes effect* is decided by replaying the stored set into the state the rules'
model derives (the community's membership, injected with the rules).  Both are
functions of the set of events, so every node holding the same set agrees.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from hearthnet.errors import BadRequest, BusError, InternalError, SchemaMismatch, Unauthorized
from hearthnet.events.envelope import Event, sign_event
from hearthnet.events.gossip import DEFAULT_BATCH, MAX_BATCH, lacking, parse_version_vector
from hearthnet.events.rules import EventRule, EventRules, LogState
from hearthnet.identity.keys import Identity

__all__ = ["MAX_LAMPORT_STEP", "NO_COMMUNITY", "EventLog", "IngestReport"]

NO_COMMUNITY = (
    "this node is in no community yet: found one with 'hearthnet community create NAME', "
    "or join one with 'hearthnet join TOKEN' (a member makes the token with 'hearthnet invite NODE_ID')"
)
"""What a user reads when asking a node without a community for its members or log."""

MAX_LAMPORT_STEP = 1 << 20
"""How far above the event replaying just before it a received event's Lamport time may be.

An honest event is exactly one above an event its author holds, and gossip
sends events in replay order, so honest logs have no gap above 1.  The bound
keeps a member from pushing the clock to 2^53-1 with one event (which would
stop every writer, the anchors who would revoke it included): it now takes
2^33 stored events.  Monotone: more events before it only narrow the gap.
"""

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
_STORE_VERSION = "2"  # 2: event ids are bound to (author, seq)
_COLS = "body, signature"
_KEY_CHUNK = 64  # keys read per author and query while merging a sync batch
_WIRE_OVERHEAD = 32  # bytes a {body, sig} map adds around its two byte strings (upper bound)


@dataclass(frozen=True)
class IngestReport:
    """Outcome of :meth:`EventLog.ingest`; ``rejected`` holds (event_id, error code, reason)."""

    accepted: list[Event] = field(default_factory=list)
    duplicates: int = 0
    rejected: list[tuple[str, str, str]] = field(default_factory=list)


S = TypeVar("S", bound=LogState)
T = TypeVar("T")


class EventLog(Generic[S]):
    """One community's event log in one SQLite file (WAL, synchronous=FULL), replayed into the
    state (``S``) that ``rules.model`` derives."""

    def __init__(self, path: Path, *, rules: EventRules[S]) -> None:
        self._rules = rules
        self._model = rules.model
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._check_store_version(path)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'community_id'").fetchone()
            self._community_id: str | None = None if row is None else str(row[0])
            self._tail: tuple[int, str] | None = None
            self._contig: dict[str, int] = {}  # author -> highest seq held without a gap below
            self._last_key: dict[str, tuple[int, str]] = {}  # author -> key of its event at _contig
            self._max_seq: dict[str, int] = {}
            rows = self._db.execute("SELECT author, seq, lamport, event_id FROM events ORDER BY author, seq")
            for author, seq, lamport, event_id in rows:
                self._note_stored(author, seq, (lamport, event_id))
            tail = self._db.execute(
                "SELECT lamport, event_id FROM events ORDER BY lamport DESC, event_id DESC LIMIT 1"
            ).fetchone()
            if tail is not None:
                self._tail = (int(tail[0]), str(tail[1]))
        except BaseException:
            self._db.close()
            raise
        self._membership: S | None = None

    def _check_store_version(self, path: Path) -> None:
        """Refuse a file whose events older code wrote (their ids are not bound to author and seq)."""
        self._db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_version', ?)", (_STORE_VERSION,)
        )
        version = str(self._db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()[0])
        if version == _STORE_VERSION:
            return
        if self._db.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None:
            raise SchemaMismatch(
                f"{path.name} holds events of store version {version}; this node reads version "
                f"{_STORE_VERSION} (event ids bound to their author): move the file away and join again"
            )
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'store_version'", (_STORE_VERSION,))

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

        A ``community.created`` on an unbound log binds it to the derived id,
        after the event passed its checks.  A ``member.revoked``,
        ``member.demoted`` or ``member.promoted`` without ``cutoff_seq`` gets
        the target's highest contiguous seq held here.
        """
        with self._lock:
            community_id = self._community_id
            if community_id is None:
                if event_type != self._model.founding_type or not isinstance(data.get("name"), str):
                    raise BadRequest(NO_COMMUNITY)
                community_id = self._model.community_id_for(identity.node_id, data["name"])
            membership = (
                self._current() if self._community_id is not None else self._model.empty(community_id)
            )
            own = self._last_key.get(identity.node_id)
            event = sign_event(
                identity,
                community_id=community_id,
                event_type=event_type,
                data=self._with_cutoff(event_type, data),
                lamport=max(membership.clock(), 0 if own is None else own[0]) + 1,
                seq=self._max_seq.get(identity.node_id, 0) + 1,
            )
            self._rules.check(event, membership)
            if self._community_id is None:
                self.set_community(community_id)
                membership = self._current()
            self._store([event])
            membership.apply(event, self._rules)
            if membership.needs_replay:
                self._rederive()
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
            slots: set[tuple[str, int]] = set()
            for ev in sorted(events, key=lambda e: e.key):
                reason = self._pre_check(ev, fresh, slots)
                if reason == "duplicate":
                    duplicates += 1
                elif reason is not None:
                    rejected.append((ev.event_id, BadRequest.code, reason))
                else:
                    fresh[ev.event_id] = ev
                    slots.add((ev.author, ev.seq))
            try:
                candidates = self._screen(list(fresh.values()), rejected)  # in replay order
                if not candidates:
                    return IngestReport([], duplicates, rejected)
                accepted, membership = self._admit(candidates, rejected)
                self._store(accepted)
            except BaseException:
                self._membership = None
                raise
            if membership.needs_replay:
                self._rederive()
            else:
                self._membership = membership
            return IngestReport(accepted, duplicates, rejected)

    # -- reading -----------------------------------------------------------
    def version_vector(self) -> dict[str, int]:
        """Author -> highest sequence number up to which every event is held."""
        with self._lock:
            return {a: s for a, s in self._contig.items() if s > 0}

    def missing_for(self, remote_vv: Mapping[str, int], *, limit: int = DEFAULT_BATCH) -> list[Event]:
        """Events the peer (with ``remote_vv``) lacks: the first ``limit`` of :meth:`missing_batch`."""
        return self.missing_batch(remote_vv, limit=limit)[0]

    def missing_batch(
        self, remote_vv: Mapping[str, int], *, limit: int = DEFAULT_BATCH, max_bytes: int | None = None
    ) -> tuple[list[Event], bool]:
        """The first events in replay order that the peer lacks, and whether more remain.

        Each author's events come as a run from the peer's held seq + 1 upward,
        so a cut batch leaves no gap.  At most ``limit`` events and, if given,
        ``max_bytes`` of encoded events (always at least one).  Keys are merged
        first; bodies are read only for the events sent.
        """
        vv = parse_version_vector(remote_vv)
        limit = max(1, min(int(limit), MAX_BATCH))
        with self._lock:
            runs = [self._keys_from(author, first) for author, first in lacking(self._contig, vv).items()]
            keys = list(itertools.islice(heapq.merge(*runs), limit + 1))
            more = len(keys) > limit
            events: list[Event] = []
            used = 0
            for _lamport, event_id in keys[:limit]:
                body, signature = self._db.execute(
                    f"SELECT {_COLS} FROM events WHERE event_id = ?", (event_id,)
                ).fetchone()
                size = len(body) + len(signature) + _WIRE_OVERHEAD
                if events and max_bytes is not None and used + size > max_bytes:
                    more = True
                    break
                events.append(Event.from_stored(body, signature))
                used += size
        return events, more

    def replay(self) -> list[Event]:
        """All stored events in ``(lamport, event_id)`` order."""
        with self._lock:
            return list(self._replay_iter())

    def replay_page(self, after: tuple[int, str] | None, limit: int) -> list[Event]:
        """Up to ``limit`` stored events in replay order, starting after the key ``after``."""
        start = (0, "") if after is None else after  # every stored Lamport time is at least 1
        with self._lock:
            return list(
                self._iter(
                    f"SELECT {_COLS} FROM events WHERE (lamport, event_id) > (?, ?) "
                    "ORDER BY lamport, event_id LIMIT ?",
                    (*start, limit),
                )
            )

    def membership(self) -> S:
        """The state derived from all stored events (a copy; cached internally)."""
        with self._lock:
            return self._current().copy()

    def view(self, read: Callable[[S], T]) -> T:
        """``read(state)`` on the current state, without copying it (the bus asks a level on every
        call): ``read`` must not keep or change it."""
        with self._lock:
            return read(self._current())

    def get(self, event_id: str) -> Event | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLS} FROM events WHERE event_id = ?", (event_id,)).fetchone()
        return None if row is None else Event.from_stored(row[0], row[1])

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def events_of_type(
        self, event_type: str, *, effective_only: bool = False, author: str | None = None
    ) -> list[Event]:
        """Stored events of one type (by one ``author``) in replay order.

        ``effective_only`` drops the ones that have no effect.
        """
        where, args = "event_type = ?", [event_type]
        if author is not None:
            where, args = where + " AND author = ?", [*args, author]
        with self._lock:
            events = list(
                self._iter(
                    f"SELECT {_COLS} FROM events WHERE {where} ORDER BY lamport, event_id", tuple(args)
                )
            )
            if effective_only:
                membership = self._current()
                events = [e for e in events if membership.is_effective(e.event_id)]
            return events

    @property
    def lamport_clock(self) -> int:
        """The highest Lamport time of a stored event whose author is not revoked.

        A local event gets one more than this or than its author's previous
        event, whichever is higher.  A revoked member's events never move the
        clock, so they cannot push it to its limit (see the state's ``clock``).
        """
        with self._lock:
            return 0 if self._community_id is None else self._current().clock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> EventLog[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------
    def _iter(self, sql: str, args: tuple[Any, ...]) -> Iterator[Event]:
        """Stream decoded events; rows are fetched a few hundred at a time."""
        cursor = self._db.execute(sql, args)
        try:
            while rows := cursor.fetchmany(256):
                for body, signature in rows:
                    yield Event.from_stored(body, signature)
        finally:
            cursor.close()

    def _replay_iter(self) -> Iterator[Event]:
        return self._iter(f"SELECT {_COLS} FROM events ORDER BY lamport, event_id", ())

    def _current(self) -> S:
        if self._membership is None:
            if self._community_id is None:
                raise BadRequest(NO_COMMUNITY)
            self._membership = self._model.derive(self._community_id, self._replay_iter, self._rules)
        return self._membership

    def _rederive(self) -> None:
        """Replay everything now (a restriction turned up): here, in the writer's thread, not
        later in whichever caller (the bus, on the event loop) asks for a level first."""
        self._membership = None
        self._current()

    def _with_cutoff(self, event_type: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
        target = data.get("node_id")
        if event_type in self._model.cutoff_types and "cutoff_seq" not in data and isinstance(target, str):
            return {**data, "cutoff_seq": self._contig.get(target, 0)}
        return data

    def _keys_from(self, author: str, first: int) -> Iterator[tuple[int, str]]:
        """Replay keys of ``author``'s events from seq ``first`` up to its contiguous end, in seq order."""
        last = self._contig.get(author, 0)
        after = first - 1
        while True:
            rows = self._db.execute(
                "SELECT lamport, event_id, seq FROM events WHERE author = ? AND seq > ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (author, after, last, _KEY_CHUNK),
            ).fetchall()
            for lamport, event_id, _seq in rows:
                yield (lamport, event_id)
            if len(rows) < _KEY_CHUNK:
                return
            after = rows[-1][2]

    def _holds_slot(self, author: str, seq: int) -> bool:
        if seq <= self._contig.get(author, 0):
            return True
        if seq > self._max_seq.get(author, 0):
            return False
        row = self._db.execute("SELECT 1 FROM events WHERE author = ? AND seq = ?", (author, seq)).fetchone()
        return row is not None

    def _pre_check(self, ev: Event, fresh: Mapping[str, Event], slots: set[tuple[str, int]]) -> str | None:
        """Stateless rejections; ``"duplicate"`` for an event already held."""
        if ev.community_id != self._community_id:
            return "event belongs to another community"
        held = fresh.get(ev.event_id)
        if held is None:
            row = self._db.execute("SELECT body FROM events WHERE event_id = ?", (ev.event_id,)).fetchone()
            held_body = None if row is None else bytes(row[0])
        else:
            held_body = held.body
        if held_body is not None:
            if held_body == ev.body:
                return "duplicate"
            return f"equivocation: {ev.author} signed another body for event id {ev.event_id}"
        if (ev.author, ev.seq) in slots or self._holds_slot(ev.author, ev.seq):
            return f"equivocation: {ev.author} already has an event with seq {ev.seq}"
        return None

    def _screen(self, candidates: list[Event], rejected: list[tuple[str, str, str]]) -> list[Event]:
        """Refuse, before any replay, what no position could admit.

        Unknown types and bad data; a founding event that is not the founder's
        own for this community id, or that comes after the community was
        founded; authors that were never admitted and that no founding event or
        grant by an admissible author in this batch names; and events whose
        author's highest level ever is below what their type needs, unless a
        grant in this batch names the author.  Admission would refuse them all
        anyway; this keeps junk from forcing a replay of the stored history.
        """
        if not candidates:
            return []
        current = self._current()
        valid: list[tuple[Event, EventRule]] = []
        for ev in candidates:
            try:
                rule = self._rules.validate(ev)
                if rule.founding:
                    if current.founder is not None:
                        raise BadRequest(
                            "the community already exists; only the first community.created counts"
                        )
                    if rule.authorize is not None:
                        rule.authorize(ev, None)  # stateless: signed by the founder its id derives from
                valid.append((ev, rule))
            except BusError as exc:
                rejected.append((ev.event_id, exc.code, exc.message))
        # Authors some position could admit: admitted before, founders in this batch, and
        # (transitively) whoever those invite or promote here -- not strangers inviting strangers.
        admissible = {e.author for e, rule in valid if rule.founding}
        admissible.update(e.author for e, _ in valid if current.ever_level(e.author) is not None)
        named_by: dict[str, list[str]] = {}  # author -> whom its grants in this batch name
        for e, _ in valid:
            if e.event_type in self._model.grant_types:
                named_by.setdefault(e.author, []).append(str(e.data.get("node_id")))
        named = {n for names in named_by.values() for n in names}
        frontier = list(admissible)
        while frontier:  # each author is expanded once: linear in the batch
            for granted in named_by.pop(frontier.pop(), ()):
                if granted not in admissible:
                    admissible.add(granted)
                    frontier.append(granted)
        kept: list[Event] = []
        for ev, rule in valid:
            refusal: BusError | None = None
            if ev.author not in admissible:
                refusal = Unauthorized(f"{ev.author} was never admitted to the community")
            elif not rule.founding and ev.author not in named:
                ever = current.ever_level(ev.author)
                if ever is not None and ever < rule.min_level:
                    refusal = Unauthorized(
                        f"{ev.event_type} needs level {rule.min_level.label}; "
                        f"the author was never above {ever.label}"
                    )
            if refusal is None:
                kept.append(ev)
            else:
                rejected.append((ev.event_id, refusal.code, refusal.message))
        return kept

    def _admit(self, candidates: list[Event], rejected: list[tuple[str, str, str]]) -> tuple[list[Event], S]:
        """Check candidates (replay order) at their positions; return accepted + new membership."""
        community_id = self._community_id
        assert community_id is not None
        first = candidates[0].key
        if self._tail is None or first > self._tail:
            membership = self._current().copy()
            stored: Iterable[Event] = ()
        else:  # some land inside the stored history: replay prefix, then merge-walk the suffix

            def prefix() -> Iterator[Event]:
                return self._iter(
                    f"SELECT {_COLS} FROM events WHERE (lamport, event_id) < (?, ?) "
                    "ORDER BY lamport, event_id",
                    first,
                )

            membership = self._model.derive(community_id, prefix, self._rules)
            stored = self._iter(
                f"SELECT {_COLS} FROM events WHERE (lamport, event_id) > (?, ?) ORDER BY lamport, event_id",
                first,
            )
        accepted: list[Event] = []
        walked: dict[str, int] = {}  # author -> seq accepted last in this walk
        below = self._lamport_before(first)  # Lamport time of the event replaying just before
        tagged = heapq.merge(
            ((e.key, 0, e) for e in stored), ((e.key, 1, e) for e in candidates), key=lambda t: t[0]
        )
        for _key, is_new, ev in tagged:
            if is_new:
                try:
                    _check_step(ev, below)
                    self._rules.admit(ev, membership)
                    self._check_sequence(ev, walked)
                except BusError as exc:
                    rejected.append((ev.event_id, exc.code, exc.message))
                    continue
                accepted.append(ev)
                walked[ev.author] = ev.seq
            below = ev.lamport
            membership.apply(ev, self._rules)
        return accepted, membership

    def _lamport_before(self, key: tuple[int, str]) -> int:
        """The Lamport time of the stored event replaying just before ``key`` (0: none)."""
        if self._tail is not None and key > self._tail:
            return self._tail[0]
        row = self._db.execute(
            "SELECT lamport FROM events WHERE (lamport, event_id) < (?, ?) "
            "ORDER BY lamport DESC, event_id DESC LIMIT 1",
            key,
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _check_sequence(self, ev: Event, walked: Mapping[str, int]) -> None:
        """An author's events are stored without gaps, each replaying after its predecessor."""
        held = walked.get(ev.author)
        before: tuple[int, str] | None = None  # a predecessor accepted in this walk replays earlier
        if held is None:
            held = self._contig.get(ev.author, 0)
            before = self._last_key.get(ev.author)
        if ev.seq != held + 1:
            raise BadRequest(f"out of sequence: {ev.author} seq {ev.seq}, but only seq 1..{held} are held")
        if before is not None and before >= ev.key:
            raise BadRequest(f"{ev.author}'s seq {ev.seq} replays before its seq {held}")

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
            with contextlib.suppress(sqlite3.Error):  # e.g. BEGIN itself failed: nothing to roll back
                self._db.execute("ROLLBACK")
            raise InternalError(f"event log write failed: {type(exc).__name__}") from exc
        for e in events:
            self._note_stored(e.author, e.seq, e.key)
            if self._tail is None or e.key > self._tail:
                self._tail = e.key

    def _note_stored(self, author: str, seq: int, key: tuple[int, str]) -> None:
        self._max_seq[author] = max(self._max_seq.get(author, 0), seq)
        if seq == self._contig.get(author, 0) + 1:
            self._contig[author] = seq
            self._last_key[author] = key


def _check_step(ev: Event, below: int) -> None:
    """Refuse a Lamport time more than :data:`MAX_LAMPORT_STEP` above the event before it."""
    if ev.lamport - below > MAX_LAMPORT_STEP:
        raise BadRequest(
            f"Lamport time {ev.lamport} is more than {MAX_LAMPORT_STEP} above the event before it "
            f"({below}): its history has not arrived, or it would race the clock to its limit"
        )
