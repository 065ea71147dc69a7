"""The durable SQLite event log: reopen, idempotence, equivocation, clocks, batches."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from hearthnet.community import Level
from hearthnet.errors import BadRequest
from hearthnet.events import Event, EventLog, default_rules, lacking, pull, sign_event
from hearthnet.identity.keys import Identity

FOUNDER = Identity.from_seed(b"F" * 32)
ALICE = Identity.from_seed(b"A" * 32)
BOB = Identity.from_seed(b"B" * 32)
OUTSIDER = Identity.from_seed(b"O" * 32)


def _open(path: Path) -> EventLog:
    return EventLog(path, rules=default_rules())


def _founded(path: Path) -> EventLog:
    log = _open(path)
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": ALICE.node_id, "level": "trusted"})
    return log


def _joined(path: Path, source: EventLog) -> EventLog:
    log = _open(path)
    log.set_community(source.community_id or "")
    pull(log, source.missing_for)
    return log


def test_durable_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = _founded(path)
    event = log.append_local(ALICE, "member.invited", {"node_id": BOB.node_id, "level": "member"})
    before = (log.replay(), log.version_vector(), log.membership().snapshot(), log.lamport_clock)
    log.close()
    with _open(path) as again:
        assert again.community_id is not None
        assert (
            again.replay(),
            again.version_vector(),
            again.membership().snapshot(),
            again.lamport_clock,
        ) == before
        assert again.get(event.event_id) == event
        assert again.count() == 3
        follow = again.append_local(FOUNDER, "member.promoted", {"node_id": BOB.node_id, "level": "trusted"})
        assert follow.lamport == 4 and follow.seq == 3


def test_wal_and_append_only(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    with _founded(path):
        pass
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute("DELETE FROM events")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute("UPDATE events SET lamport = 99")
    finally:
        db.close()


def test_duplicates_are_idempotent(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        events = a.replay()
        report = b.ingest(events + events)
        assert report.accepted == [] and report.duplicates == 4 and report.rejected == []
        assert b.count() == 2
        assert b.replay() == events


def test_equivocation_is_rejected(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        first = sign_event(
            ALICE,
            community_id=cid,
            event_type="member.invited",
            data={"node_id": BOB.node_id, "level": "member"},
            lamport=3,
            seq=1,
        )
        fork = sign_event(
            ALICE,
            community_id=cid,
            event_type="member.invited",
            data={"node_id": OUTSIDER.node_id, "level": "member"},
            lamport=3,
            seq=1,
        )
        report = a.ingest([first, fork])
        assert len(report.accepted) == 1 and len(report.rejected) == 1
        assert "equivocation" in report.rejected[0][2]
        later = a.ingest([fork if report.accepted[0] == first else first])
        assert later.accepted == [] and "equivocation" in later.rejected[0][2]
        assert a.count() == 3


def test_rejected_events_are_counted_and_never_stored(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        by_outsider = sign_event(
            OUTSIDER,
            community_id=cid,
            event_type="member.invited",
            data={"node_id": BOB.node_id, "level": "member"},
            lamport=5,
            seq=1,
        )
        too_high = sign_event(
            ALICE,
            community_id=cid,
            event_type="member.invited",
            data={"node_id": BOB.node_id, "level": "anchor"},
            lamport=5,
            seq=1,
        )
        unknown = sign_event(
            ALICE, community_id=cid, event_type="chat.message", data={"text": "hi"}, lamport=6, seq=2
        )
        bad_data = sign_event(
            FOUNDER,
            community_id=cid,
            event_type="member.revoked",
            data={"node_id": ALICE.node_id},
            lamport=7,
            seq=3,
        )
        report = a.ingest([unknown, by_outsider, bad_data, too_high])
        assert report.accepted == []
        assert {r[0]: r[1] for r in report.rejected} == {
            by_outsider.event_id: "unauthorized",
            too_high.event_id: "unauthorized",
            unknown.event_id: "bad_request",
            bad_data.event_id: "bad_request",
        }
        assert a.count() == 2
        assert all(a.get(e.event_id) is None for e in (by_outsider, too_high, unknown, bad_data))
        assert a.lamport_clock == 2  # rejected events do not move the clock


def test_lamport_clock_advances_past_received_events(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        far = sign_event(
            ALICE,
            community_id=a.community_id or "",
            event_type="member.invited",
            data={"node_id": BOB.node_id, "level": "member"},
            lamport=1000,
            seq=1,
        )
        assert a.ingest([far]).accepted == [far]
        assert a.lamport_clock == 1000
        mine = a.append_local(FOUNDER, "member.promoted", {"node_id": BOB.node_id, "level": "trusted"})
        assert mine.lamport == 1001 and mine.seq == 3
        assert a.membership().level_of(BOB.node_id) is Level.TRUSTED


def test_batch_with_invite_and_invitee_events_in_any_order(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        a.append_local(ALICE, "member.invited", {"node_id": BOB.node_id, "level": "member"})
        a.append_local(FOUNDER, "member.promoted", {"node_id": BOB.node_id, "level": "trusted"})
        a.append_local(BOB, "member.invited", {"node_id": OUTSIDER.node_id, "level": "member"})
        batch = a.missing_for(b.version_vector())
        assert len(batch) == 3
        batch.reverse()  # invitee's event first
        report = b.ingest(batch)
        assert len(report.accepted) == 3 and report.rejected == []
        assert b.membership().snapshot() == a.membership().snapshot()


def test_out_of_order_insertion_recomputes_membership(tmp_path: Path) -> None:
    """An event landing before stored ones is checked at its own replay position."""
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        cid = a.community_id or ""
        # On a: Alice invites Bob at lamport 10.  On b (concurrently): founder revokes Alice at 5.
        invite = sign_event(
            ALICE,
            community_id=cid,
            event_type="member.invited",
            data={"node_id": BOB.node_id, "level": "member"},
            lamport=10,
            seq=1,
        )
        revoke = sign_event(
            FOUNDER,
            community_id=cid,
            event_type="member.revoked",
            data={"node_id": ALICE.node_id, "reason": "r"},
            lamport=5,
            seq=3,
        )
        assert a.ingest([invite]).accepted == [invite]
        assert a.membership().level_of(BOB.node_id) is Level.MEMBER
        assert a.ingest([revoke]).accepted == [revoke]
        assert b.ingest([revoke]).accepted == [revoke]
        assert b.ingest([invite]).accepted == [invite]  # stored alike on both nodes
        for log in (a, b):
            m = log.membership()
            assert m.level_of(BOB.node_id) is None and m.is_revoked(ALICE.node_id)
            assert not m.is_effective(invite.event_id)
        assert a.membership().snapshot() == b.membership().snapshot()
        assert a.replay() == b.replay()


def test_version_vector_and_missing_for(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        for i in range(7):
            a.append_local(
                ALICE,
                "member.invited",
                {"node_id": Identity.from_seed(bytes([i]) * 32).node_id, "level": "member"},
            )
        assert a.version_vector() == {FOUNDER.node_id: 2, ALICE.node_id: 7}
        assert a.missing_for(a.version_vector()) == []
        batch = a.missing_for({FOUNDER.node_id: 2, ALICE.node_id: 3}, limit=2)
        assert [(e.author, e.seq) for e in batch] == [(ALICE.node_id, 4), (ALICE.node_id, 5)]
        full = a.missing_for({})
        assert [e.key for e in full] == sorted(e.key for e in full) and len(full) == 9
        with pytest.raises(BadRequest):
            a.missing_for({FOUNDER.node_id: -1})
        with pytest.raises(BadRequest):
            a.missing_for({5: 1})  # type: ignore[dict-item]


def test_pull_loops_over_bounded_batches(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        for i in range(25):
            a.append_local(
                ALICE,
                "member.invited",
                {"node_id": Identity.from_seed(bytes([i]) * 32).node_id, "level": "member"},
            )
        result = pull(b, lambda vv: a.missing_for(vv, limit=4))
        assert result.accepted == 25 and result.rounds == 8
        assert b.replay() == a.replay()


def test_lacking_is_exact_per_author() -> None:
    assert lacking({"a": 5, "b": 2, "c": 1}, {"a": 3, "b": 2, "d": 9}) == {"a": 4, "c": 1}
    assert lacking({}, {"a": 1}) == {}


def test_no_community_yet(tmp_path: Path) -> None:
    with _open(tmp_path / "x.db") as log, _founded(tmp_path / "a.db") as a:
        with pytest.raises(BadRequest):
            log.append_local(ALICE, "member.invited", {"node_id": BOB.node_id, "level": "member"})
        report = log.ingest(a.replay())
        assert report.accepted == [] and len(report.rejected) == 2
        log.set_community(a.community_id or "")
        with pytest.raises(BadRequest):
            log.set_community("hc1:other")


def test_thread_safe_appends(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        ids = [Identity.from_seed(bytes([i + 1]) * 32) for i in range(8)]
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                for j in range(k, len(ids), 2):
                    a.append_local(FOUNDER, "member.invited", {"node_id": ids[j].node_id, "level": "member"})
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert a.version_vector()[FOUNDER.node_id] == 10
        assert len(a.membership().members()) == 10


def test_events_round_trip_through_the_wire(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        a.append_local(ALICE, "member.invited", {"node_id": BOB.node_id, "level": "member"})
        wire = [e.to_wire() for e in a.missing_for(b.version_vector())]
        random.Random(1).shuffle(wire)
        report = b.ingest([Event.from_wire(w) for w in wire])
        assert len(report.accepted) == 1
