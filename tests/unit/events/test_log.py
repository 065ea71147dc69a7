"""The durable SQLite event log: reopen, idempotence, equivocation, clocks, batches."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.community import Level, Membership, derive_membership
from hearthnet.community.rules import MEMBERSHIP, default_rules
from hearthnet.errors import BadRequest, SchemaMismatch
from hearthnet.events import (
    Event,
    EventLog,
    EventRule,
    EventRules,
    lacking,
    pull,
    require_fields,
    sign_event,
)
from hearthnet.events.envelope import MAX_LAMPORT
from hearthnet.events.log import MAX_LAMPORT_STEP
from hearthnet.identity.keys import Identity
from hearthnet.wire.codec import pack, unpack_map

FOUNDER = Identity.from_seed(b"F" * 32)
ALICE = Identity.from_seed(b"A" * 32)
BOB = Identity.from_seed(b"B" * 32)
OUTSIDER = Identity.from_seed(b"O" * 32)


def _open(path: Path) -> EventLog[Membership]:
    return EventLog(path, rules=default_rules())


def _invite(
    cid: str, invitee: Identity, *, lamport: int, seq: int, level: str = "member", author: Identity = ALICE
) -> Event:
    """A signed ``member.invited`` of ``invitee`` by ``author`` (not stored anywhere)."""
    return sign_event(
        author,
        community_id=cid,
        event_type="member.invited",
        data={"node_id": invitee.node_id, "level": level},
        lamport=lamport,
        seq=seq,
    )


def _founded(path: Path) -> EventLog[Membership]:
    log = _open(path)
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": ALICE.node_id, "level": "trusted"})
    return log


def _joined(path: Path, source: EventLog[Membership]) -> EventLog[Membership]:
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
        first = _invite(cid, BOB, lamport=3, seq=1)
        fork = _invite(cid, OUTSIDER, lamport=3, seq=1)
        report = a.ingest([first, fork])
        assert len(report.accepted) == 1 and len(report.rejected) == 1
        assert "equivocation" in report.rejected[0][2]
        later = a.ingest([fork if report.accepted[0] == first else first])
        assert later.accepted == [] and "equivocation" in later.rejected[0][2]
        assert a.count() == 3


def test_rejected_events_are_counted_and_never_stored(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        by_outsider = _invite(cid, BOB, lamport=5, seq=1, author=OUTSIDER)
        too_high = _invite(cid, BOB, lamport=5, seq=1, level="anchor")
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
        far = _invite(a.community_id or "", BOB, lamport=1000, seq=1)
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
        invite = _invite(cid, BOB, lamport=10, seq=1)
        revoke = sign_event(
            FOUNDER,
            community_id=cid,
            event_type="member.revoked",
            data={"node_id": ALICE.node_id, "reason": "r", "cutoff_seq": 0},
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


# -- event ids, contiguous storage, gap-free batches ------------------------------------------


def test_a_member_cannot_squat_on_another_events_id(tmp_path: Path) -> None:
    """The attacker's copy of its own revocation's id never verifies, so the genuine one arrives."""
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        revocation = a.append_local(FOUNDER, "member.revoked", {"node_id": ALICE.node_id, "reason": "bye"})
        own = _invite(a.community_id or "", BOB, lamport=revocation.lamport - 1, seq=1)
        fields = unpack_map(own.body)
        fields["event_id"] = revocation.event_id
        body = pack(fields)
        with pytest.raises(BadRequest):
            Event.from_wire({"body": body, "sig": ALICE.sign(body)})
        assert pull(b, a.missing_for).accepted == 1
        assert b.membership().is_revoked(ALICE.node_id) and b.get(revocation.event_id) == revocation


def _note(author: Identity, log: EventLog[Membership], lamport: int, seq: int, size: int = 10) -> Event:
    return sign_event(
        author,
        community_id=log.community_id or "",
        event_type="note.posted",
        data={"text": "n" * size},
        lamport=lamport,
        seq=seq,
    )


def _validate_note(data: Mapping[str, Any]) -> None:
    require_fields(data, {"text": str})


def _note_rules() -> EventRules[Membership]:
    rules = default_rules()
    rules.register(EventRule("note.posted", Level.MEMBER, _validate_note))
    return rules


def test_an_author_withholding_a_seq_cannot_stall_gossip(tmp_path: Path) -> None:
    """Seq 2.. without seq 1 is stored nowhere; gossip in small batches still delivers what is new."""
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        gapped = [_note_like_invite(a, seq=s) for s in range(2, 13)]
        for log in (a, b):
            report = log.ingest(gapped)
            assert report.accepted == [] and {r[1] for r in report.rejected} == {"bad_request"}
            assert all("out of sequence" in r[2] for r in report.rejected)
        fresh = [
            a.append_local(FOUNDER, "member.invited", {"node_id": _member(i).node_id, "level": "member"})
            for i in range(3)
        ]
        a.append_local(FOUNDER, "member.revoked", {"node_id": ALICE.node_id, "reason": "x"})
        assert pull(b, lambda vv: a.missing_for(vv, limit=2)).accepted == 4
        assert all(b.get(e.event_id) == e for e in fresh) and b.membership().is_revoked(ALICE.node_id)
        # With seq 1 present the same events are stored, in one batch or after it
        first = _note_like_invite(a, seq=1)
        assert len(a.ingest([*gapped[5:], first, *gapped[:5]]).accepted) == 12
        assert a.version_vector()[ALICE.node_id] == 12


def _member(i: int) -> Identity:
    return Identity.from_seed(bytes([0xA0 + i]) * 32)


def _note_like_invite(log: EventLog[Membership], *, seq: int) -> Event:
    """Alice (trusted) invites a fresh member; Lamport times follow seq."""
    return _invite(log.community_id or "", _member(0x30 + seq), lamport=100 + seq, seq=seq)


def test_an_authors_later_seq_must_replay_after_its_earlier_one(tmp_path: Path) -> None:
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        cid = a.community_id or ""
        one = _invite(cid, BOB, lamport=50, seq=1)
        two = _invite(cid, OUTSIDER, lamport=40, seq=2)
        together = a.ingest([two, one])
        assert together.accepted == [one] and together.rejected[0][0] == two.event_id
        assert b.ingest([one]).accepted == [one]
        later = b.ingest([two])
        assert later.accepted == [] and "replays before" in later.rejected[0][2]
        assert a.replay() == b.replay()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=40),
    st.lists(st.integers(0, 40), min_size=4, max_size=4),
    st.integers(1, 12),
)
def test_missing_for_sends_gap_free_runs_in_replay_order(
    writes: list[tuple[int, int]], held: list[int], limit: int
) -> None:
    """Whatever the peer holds and the limit, each author's part of a batch starts right after it."""
    authors = [FOUNDER, ALICE, BOB, OUTSIDER]
    with EventLog(Path(":memory:"), rules=_note_rules()) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for who in authors[1:]:
            log.append_local(FOUNDER, "member.invited", {"node_id": who.node_id, "level": "member"})
        for k, bump in writes:  # several writers with Lamport clocks that jump
            own = log.version_vector().get(authors[k].node_id, 0)
            log.ingest([_note(authors[k], log, log.lamport_clock + bump, own + 1)])
        vv = log.version_vector()
        remote = {a.node_id: min(h, vv.get(a.node_id, 0)) for a, h in zip(authors, held, strict=True)}
        batch, more = log.missing_batch(remote, limit=limit)
        assert [e.key for e in batch] == sorted(e.key for e in batch)
        lacking = sum(vv.get(a.node_id, 0) - remote[a.node_id] for a in authors)
        assert len(batch) == min(limit, lacking) and more == (lacking > limit)
        for a in authors:
            seqs = [e.seq for e in batch if e.author == a.node_id]
            assert seqs == list(range(remote[a.node_id] + 1, remote[a.node_id] + 1 + len(seqs)))
        # and it is a prefix of the whole replay restricted to what the peer lacks
        wanted = [e for e in log.replay() if e.seq > remote.get(e.author, 0)]
        assert batch == wanted[: len(batch)]


def test_missing_batch_is_cut_by_bytes_and_always_carries_one_event(tmp_path: Path) -> None:
    with EventLog(tmp_path / "a.db", rules=_note_rules()) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        log.append_local(FOUNDER, "member.invited", {"node_id": ALICE.node_id, "level": "member"})
        start = {FOUNDER.node_id: 2}
        for seq in range(1, 11):
            log.ingest([_note(ALICE, log, log.lamport_clock + 1, seq, size=60_000)])
        batch, more = log.missing_batch(start, limit=10, max_bytes=200_000)
        assert [e.seq for e in batch] == [1, 2, 3] and more
        assert sum(len(e.body) + len(e.signature) for e in batch) <= 200_000
        one, more = log.missing_batch(start, limit=10, max_bytes=1_000)
        assert [e.seq for e in one] == [1] and more
        everything, more = log.missing_batch(start, limit=10, max_bytes=10_000_000)
        assert len(everything) == 10 and not more


def test_missing_for_reads_bodies_only_for_the_events_it_sends(tmp_path: Path) -> None:
    """Before: up to ``limit`` bodies per lacking author were loaded, then most dropped."""
    writers = [_member(i) for i in range(8)]
    with EventLog(tmp_path / "a.db", rules=_note_rules()) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for w in writers:
            log.append_local(FOUNDER, "member.invited", {"node_id": w.node_id, "level": "member"})
        base = log.lamport_clock
        for seq in range(1, 101):
            log.ingest([_note(w, log, base + seq * 10 + k, seq, size=8000) for k, w in enumerate(writers)])
        tracemalloc.start()
        try:
            batch = log.missing_for({}, limit=100)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sent = sum(len(e.body) for e in batch)
        assert len(batch) == 100 and peak < 2 * sent + 1_000_000, (peak, sent)


def count_replays(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that gets one entry per replay of the stored history (``derive_membership``)."""
    replays: list[object] = []

    def counted(*args: Any) -> Membership:
        replays.append(args)
        return derive_membership(*args)

    monkeypatch.setattr(MEMBERSHIP, "derive", counted)  # the model every log of default_rules() uses
    return replays


def test_junk_from_a_stranger_never_replays_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A never-admitted author's event, however early its Lamport time, is refused before any replay."""
    with _founded(tmp_path / "a.db") as a:
        for i in range(20):
            a.append_local(ALICE, "member.invited", {"node_id": _member(i).node_id, "level": "member"})
        a.membership()  # the cache is warm
        replays = count_replays(monkeypatch)
        junk = _invite(a.community_id or "", BOB, lamport=1, seq=1, author=OUTSIDER)
        report = a.ingest([junk])
        assert report.rejected == [
            (junk.event_id, "unauthorized", f"{OUTSIDER.node_id} was never admitted to the community")
        ]
        assert replays == []


def test_strangers_inviting_each_other_never_replay_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming each other does not make two never-admitted authors admissible; a member's
    invitee, and whoever that invitee invites in the same batch, still are."""
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        a.membership()
        replays = count_replays(monkeypatch)
        x, y = Identity.generate(), Identity.generate()
        pair = [
            _invite(cid, y, lamport=1, seq=1, author=x),
            _invite(cid, x, lamport=2, seq=1, author=y),
        ]
        report = a.ingest(pair)
        assert sorted(r[0] for r in report.rejected) == sorted(e.event_id for e in pair)
        assert {r[1] for r in report.rejected} == {"unauthorized"}
        assert replays == []
        for i in range(3):  # history goes on after ALICE's admission (lamport 2)
            a.append_local(FOUNDER, "member.invited", {"node_id": _member(i).node_id, "level": "member"})
        newbie, newer = Identity.generate(), Identity.generate()
        chain = [  # inside the stored history, after ALICE was admitted
            _invite(cid, newbie, lamport=3, seq=1, author=ALICE),
            _invite(cid, newer, lamport=4, seq=1, author=newbie),
        ]
        report = a.ingest(chain)
        assert replays  # screened in: the rules then judge both at their positions
        screened = f"{newbie.node_id} was never admitted to the community"
        assert (chain[1].event_id, "unauthorized", screened) not in report.rejected


def test_a_huge_batch_is_checked_in_linear_time(tmp_path: Path) -> None:
    """The same-author-and-seq scan over the batch used to be quadratic (20,000 events: 80 s)."""
    stranger = Identity.generate()
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        batch = [_invite(cid, BOB, lamport=10**6 + i, seq=i, author=stranger) for i in range(1, 12_001)]
        started = time.perf_counter()
        report = a.ingest(batch)
        assert len(report.rejected) == 12_000 and a.count() == 2
        assert time.perf_counter() - started < 5.0


def test_a_revoked_members_event_does_not_move_the_clock(tmp_path: Path) -> None:
    """A revoked member's events are stored (alike everywhere) but never raise the clock."""
    with _founded(tmp_path / "a.db") as a:
        a.append_local(FOUNDER, "member.revoked", {"node_id": ALICE.node_id, "reason": "x"})
        clock = a.lamport_clock
        last = _invite(a.community_id or "", BOB, lamport=clock + MAX_LAMPORT_STEP, seq=1)
        assert a.ingest([last]).accepted == [last]  # stored alike everywhere, without effect
        assert not a.membership().is_effective(last.event_id)
        assert a.lamport_clock == clock
        after = a.append_local(FOUNDER, "member.invited", {"node_id": BOB.node_id, "level": "member"})
        assert after.lamport == clock + 1
        a.close()
        with _open(tmp_path / "a.db") as again:
            assert again.lamport_clock == after.lamport


def test_a_member_cannot_push_the_clock_to_its_limit(tmp_path: Path) -> None:
    """One event at 2^53-1 by a member in good standing would stop every writer for good,
    the anchors who would revoke it included: a Lamport time may be at most
    MAX_LAMPORT_STEP above the event replaying before it."""
    with _founded(tmp_path / "a.db") as a:
        cid, clock = a.community_id or "", a.lamport_clock
        frozen = _invite(cid, BOB, lamport=MAX_LAMPORT, seq=1)
        report = a.ingest([frozen])
        assert report.accepted == [] and a.count() == 2 and a.lamport_clock == clock
        [(event_id, code, reason)] = report.rejected
        assert (event_id, code) == (frozen.event_id, "bad_request")
        assert f"more than {MAX_LAMPORT_STEP} above the event before it ({clock})" in reason
        just = _invite(cid, BOB, lamport=clock + MAX_LAMPORT_STEP, seq=1)
        assert a.ingest([just]).accepted == [just]  # the widest step allowed
        revoke = a.append_local(FOUNDER, "member.revoked", {"node_id": ALICE.node_id, "reason": "x"})
        assert revoke.lamport == just.lamport + 1


def test_a_step_refused_early_is_taken_once_its_history_arrives(tmp_path: Path) -> None:
    """The step bound is monotone: whatever the delivery order, every log ends with the same set."""
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        cid, clock = a.community_id or "", a.lamport_clock
        one = _invite(cid, BOB, lamport=clock + MAX_LAMPORT_STEP, seq=1)
        two = _invite(cid, OUTSIDER, lamport=clock + 2 * MAX_LAMPORT_STEP, seq=3, author=FOUNDER)
        [(_, _, why)] = a.ingest([two]).rejected
        assert "its history has not arrived" in why
        assert a.ingest([one]).accepted == [one]
        assert a.ingest([two]).accepted == [two]  # offered again by the next sync
        assert b.ingest([two, one]).accepted == [one, two]  # one batch, any order
        # an event landing below the tail is judged by the event replaying just before it
        late = _invite(cid, Identity.generate(), lamport=one.lamport + 1, seq=2)
        assert a.ingest([late]).accepted == [late] and b.ingest([late]).accepted == [late]
        assert [e.event_id for e in a.replay()] == [e.event_id for e in b.replay()]


def test_a_store_written_before_bound_event_ids_is_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with _founded(path):
        pass
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '1' WHERE key = 'store_version'")
    db.commit()
    db.close()
    with pytest.raises(SchemaMismatch, match="store version 1"):
        _open(path)
    empty = tmp_path / "empty.db"
    _open(empty).close()
    db = sqlite3.connect(empty)
    db.execute("UPDATE meta SET value = '1' WHERE key = 'store_version'")
    db.commit()
    db.close()
    with _open(empty) as log:  # nothing in it yet: simply taken over
        assert log.count() == 0


def test_a_forked_author_cannot_hide_everyone_elses_events_behind_its_refused_ones(tmp_path: Path) -> None:
    """Y signs two seq-1 events; node a holds one fork, node b the other (250 events long, replaying
    earlier). a refuses b's fork, which fills whole batches; the founder's new events still arrive."""
    y = Identity.from_seed(b"Y" * 32)
    with _founded(tmp_path / "a.db") as a, _joined(tmp_path / "b.db", a) as b:
        a.append_local(FOUNDER, "member.invited", {"node_id": y.node_id, "level": "trusted"})
        pull(b, a.missing_for)
        cid = a.community_id or ""

        def invite(seq: int, lamport: int, i: int) -> Event:
            who = Identity.from_seed(bytes([0xD0, i % 256, i // 256]) + b"x" * 29)
            data = {"node_id": who.node_id, "level": "member"}
            return sign_event(
                y, community_id=cid, event_type="member.invited", data=data, lamport=lamport, seq=seq
            )

        assert len(a.ingest([invite(1, 500, 0)]).accepted) == 1
        assert len(b.ingest([invite(s, 9 + s, 1000 + s) for s in range(1, 251)]).accepted) == 250
        fresh = [
            b.append_local(
                FOUNDER,
                "member.invited",
                {"node_id": Identity.from_seed(bytes([i, 7]) * 16).node_id, "level": "member"},
            )
            for i in range(5)
        ]
        result = pull(a, lambda vv: b.missing_for(vv, limit=200))
        assert result.accepted == 5
        assert all(a.get(e.event_id) is not None for e in fresh)


def test_forged_founding_events_and_grants_beyond_the_authors_level_never_replay_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _founded(tmp_path / "a.db") as a:
        cid = a.community_id or ""
        a.append_local(FOUNDER, "member.invited", {"node_id": BOB.node_id, "level": "member"})
        a.membership()
        replays = count_replays(monkeypatch)
        stranger = Identity.generate()
        forged = sign_event(
            stranger,
            community_id=cid,
            event_type="community.created",
            data={"name": "Hearth", "founder": stranger.node_id},
            lamport=1,
            seq=1,
        )
        beyond = _invite(cid, Identity.generate(), lamport=1, seq=1, author=BOB)  # BOB is a member
        report = a.ingest([forged, beyond])
        assert {r[0]: r[1] for r in report.rejected} == {
            forged.event_id: "bad_request",  # the community was founded already
            beyond.event_id: "unauthorized",
        }
        assert "needs level trusted" in dict((r[0], r[2]) for r in report.rejected)[beyond.event_id]
        assert replays == []
