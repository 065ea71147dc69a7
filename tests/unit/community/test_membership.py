"""Membership derived from the log: rights per level, revocation, forged founding."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.community import Level, community_id_for, derive_membership
from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.errors import BadRequest, BusError, InvalidSignature, Revoked, Unauthorized
from hearthnet.events import Event, EventLog, EventRule, require_fields, sign_event
from hearthnet.identity.keys import Identity
from hearthnet.wire.codec import pack, unpack_map

FOUNDER = Identity.from_seed(b"F" * 32)
TRUSTY = Identity.from_seed(b"T" * 32)
MEMBER = Identity.from_seed(b"M" * 32)
NEWBIE = Identity.from_seed(b"N" * 32)
OUTSIDER = Identity.from_seed(b"O" * 32)
LEVELS = ["member", "trusted", "anchor"]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog[Membership]]:
    log = EventLog(tmp_path / "events.db", rules=default_rules())
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": TRUSTY.node_id, "level": "trusted"})
    log.append_local(FOUNDER, "member.invited", {"node_id": MEMBER.node_id, "level": "member"})
    yield log
    log.close()


def test_founder_is_anchor_and_community_id_is_derived(log: EventLog[Membership]) -> None:
    m = log.membership()
    assert log.community_id == community_id_for(FOUNDER.node_id, "Hearth")
    assert m.community_id == log.community_id
    assert m.name == "Hearth" and m.founder == FOUNDER.node_id
    assert m.level_of(FOUNDER.node_id) is Level.ANCHOR
    assert m.level_of(TRUSTY.node_id) is Level.TRUSTED
    assert m.level_of(MEMBER.node_id) is Level.MEMBER
    assert m.level_of(OUTSIDER.node_id) is None
    assert m.members()[MEMBER.node_id].invited_by == FOUNDER.node_id


def test_community_id_depends_on_founder_and_name() -> None:
    a = community_id_for(FOUNDER.node_id, "Hearth")
    assert a.startswith("hc1:")
    assert a != community_id_for(FOUNDER.node_id, "hearth")
    assert a != community_id_for(OUTSIDER.node_id, "Hearth")


def test_member_cannot_invite_or_revoke(log: EventLog[Membership]) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.revoked", {"node_id": TRUSTY.node_id, "reason": "x"})
    assert log.count() == 3


def test_outsider_cannot_write(log: EventLog[Membership]) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(OUTSIDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})


def test_trusted_invites_members_but_not_trusted(log: EventLog[Membership]) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "trusted"})
    with pytest.raises(Unauthorized):
        log.append_local(TRUSTY, "member.promoted", {"node_id": MEMBER.node_id, "level": "trusted"})
    log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    info = log.membership().members()[NEWBIE.node_id]
    assert info.level is Level.MEMBER and info.invited_by == TRUSTY.node_id


def test_invite_of_current_member_is_refused(log: EventLog[Membership]) -> None:
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.invited", {"node_id": MEMBER.node_id, "level": "anchor"})


def test_anchor_promotes_and_demotes(log: EventLog[Membership]) -> None:
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "anchor"})
    assert log.membership().level_of(MEMBER.node_id) is Level.ANCHOR
    log.append_local(MEMBER, "member.demoted", {"node_id": TRUSTY.node_id, "level": "member"})
    assert log.membership().level_of(TRUSTY.node_id) is Level.MEMBER
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.demoted", {"node_id": FOUNDER.node_id, "level": "member"})
    with pytest.raises(BadRequest, match="is not a member of this community"):
        log.append_local(FOUNDER, "member.promoted", {"node_id": OUTSIDER.node_id, "level": "trusted"})
    with pytest.raises(BadRequest, match="is not a member of this community"):
        log.append_local(FOUNDER, "member.demoted", {"node_id": OUTSIDER.node_id, "level": "member"})


def test_a_promotion_only_raises_and_a_demotion_only_lowers(log: EventLog[Membership]) -> None:
    """``member promote C --level member`` demoted a trusted member: now each event moves one way."""
    before = log.count()
    with pytest.raises(BadRequest, match="is trusted; a promotion must raise the level"):
        log.append_local(FOUNDER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "member"})
    with pytest.raises(BadRequest, match="is trusted; a promotion must raise the level"):
        log.append_local(FOUNDER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "trusted"})
    with pytest.raises(BadRequest, match="is member; a demotion must lower the level"):
        log.append_local(FOUNDER, "member.demoted", {"node_id": MEMBER.node_id, "level": "trusted"})
    with pytest.raises(BadRequest, match="is member; a demotion must lower the level"):
        log.append_local(FOUNDER, "member.demoted", {"node_id": MEMBER.node_id, "level": "member"})
    assert log.count() == before
    assert log.membership().level_of(TRUSTY.node_id) is Level.TRUSTED
    # a trusted member may invite members, but neither promote nor demote
    with pytest.raises(Unauthorized):
        log.append_local(TRUSTY, "member.demoted", {"node_id": MEMBER.node_id, "level": "member"})


def test_an_anchor_demotes_another_anchor_but_never_the_founder(log: EventLog[Membership]) -> None:
    """Any anchor may lower any other member's level, another anchor's too (it may revoke one
    as well); the founder stays an anchor, so the community always keeps one."""
    log.append_local(FOUNDER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "anchor"})
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "anchor"})
    log.append_local(MEMBER, "member.demoted", {"node_id": TRUSTY.node_id, "level": "trusted"})
    assert log.membership().level_of(TRUSTY.node_id) is Level.TRUSTED
    for level in ("trusted", "member"):
        with pytest.raises(Unauthorized, match="the founder stays an anchor"):
            log.append_local(MEMBER, "member.demoted", {"node_id": FOUNDER.node_id, "level": level})
    log.append_local(MEMBER, "member.demoted", {"node_id": MEMBER.node_id, "level": "member"})  # itself
    m = log.membership()
    assert m.level_of(MEMBER.node_id) is Level.MEMBER and m.level_of(FOUNDER.node_id) is Level.ANCHOR


def test_only_a_current_member_can_be_revoked(log: EventLog[Membership]) -> None:
    """A revocation of a mistyped id answered "revoked" and barred that id for ever, while the
    member meant stayed in."""
    typo = OUTSIDER.node_id
    before = log.count()
    with pytest.raises(BadRequest, match=f"{typo} is not a member of this community"):
        log.append_local(FOUNDER, "member.revoked", {"node_id": typo, "reason": "typo"})
    assert log.count() == before and not log.membership().is_revoked(typo)
    log.append_local(FOUNDER, "member.invited", {"node_id": typo, "level": "member"})  # still invitable
    assert log.membership().level_of(typo) is Level.MEMBER
    # signed by an anchor and stored, a revocation of a non-member still takes no effect
    stray = _signed(
        FOUNDER,
        log,
        "member.revoked",
        {"node_id": NEWBIE.node_id, "reason": "x", "cutoff_seq": 0},
        lamport=log.lamport_clock + 1,
    )
    other = EventLog(Path(":memory:"), rules=default_rules())
    other.set_community(log.community_id or "")
    assert other.ingest([*log.replay(), stray]).accepted[-1] == stray
    assert not other.membership().is_effective(stray.event_id)
    other.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    assert other.membership().level_of(NEWBIE.node_id) is Level.MEMBER
    other.close()


def test_revocation_is_permanent_and_ignores_later_events(log: EventLog[Membership]) -> None:
    log.append_local(FOUNDER, "member.revoked", {"node_id": TRUSTY.node_id, "reason": "lost device"})
    m = log.membership()
    assert m.level_of(TRUSTY.node_id) is None and m.is_revoked(TRUSTY.node_id)
    assert TRUSTY.node_id not in m.members()
    with pytest.raises(Revoked):
        log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    with pytest.raises(Revoked):
        log.append_local(FOUNDER, "member.invited", {"node_id": TRUSTY.node_id, "level": "member"})
    # A revoked node that has not heard of its revocation keeps writing; its event is
    # stored (it was admitted once, so every node stores it alike) but has no effect.
    late = sign_event(
        TRUSTY,
        community_id=log.community_id or "",
        event_type="member.invited",
        data={"node_id": NEWBIE.node_id, "level": "member"},
        lamport=log.lamport_clock + 1,
        seq=1,
    )
    report = log.ingest([late])
    assert [e.event_id for e in report.accepted] == [late.event_id]
    m = log.membership()
    assert m.level_of(NEWBIE.node_id) is None
    assert not m.is_effective(late.event_id)
    assert log.events_of_type("member.invited", effective_only=True)[-1].event_id != late.event_id


def test_founder_cannot_be_revoked(log: EventLog[Membership]) -> None:
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "anchor"})
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.revoked", {"node_id": FOUNDER.node_id, "reason": "coup"})
    with pytest.raises(Unauthorized):
        log.append_local(FOUNDER, "member.revoked", {"node_id": FOUNDER.node_id, "reason": "oops"})
    assert log.membership().level_of(FOUNDER.node_id) is Level.ANCHOR


def test_forged_community_created_is_rejected(tmp_path: Path) -> None:
    rules = default_rules()
    real_id = community_id_for(FOUNDER.node_id, "Hearth")
    # The outsider claims to found the founder's community.
    forged = sign_event(
        OUTSIDER,
        community_id=real_id,
        event_type="community.created",
        data={"name": "Hearth", "founder": OUTSIDER.node_id},
        lamport=1,
        seq=1,
    )
    claims_founder = sign_event(
        OUTSIDER,
        community_id=real_id,
        event_type="community.created",
        data={"name": "Hearth", "founder": FOUNDER.node_id},
        lamport=1,
        seq=2,
    )
    with EventLog(tmp_path / "e.db", rules=rules) as log:
        log.set_community(real_id)
        report = log.ingest([forged, claims_founder])
        assert report.accepted == []
        assert sorted(code for _, code, _ in report.rejected) == ["unauthorized", "unauthorized"]
        assert log.count() == 0
        assert log.membership().founder is None
    m = derive_membership(real_id, [forged, claims_founder], rules)
    assert m.members() == {} and m.founder is None


def test_only_first_created_counts() -> None:
    rules = default_rules()
    cid = community_id_for(FOUNDER.node_id, "Hearth")
    first = sign_event(
        FOUNDER,
        community_id=cid,
        event_type="community.created",
        data={"name": "Hearth", "founder": FOUNDER.node_id},
        lamport=1,
        seq=1,
    )
    second = sign_event(
        FOUNDER,
        community_id=cid,
        event_type="community.created",
        data={"name": "Hearth", "founder": FOUNDER.node_id},
        lamport=2,
        seq=2,
    )
    m = Membership(cid)
    assert m.apply(first, rules) is True
    assert m.apply(second, rules) is False


def test_bad_data_and_unknown_types_are_bad_request(log: EventLog[Membership]) -> None:
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.invited", {"node_id": "nobody", "level": "member"})
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "MEMBER"})
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id})
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "chat.message", {"text": "hi"})
    assert log.count() == 3


def _validate_ingested(data: object) -> None:
    assert isinstance(data, dict)
    require_fields(data, {"corpus": str, "doc_cid": str, "title": str, "language": str, "chunks": int})


def test_service_registers_its_own_event_type(log: EventLog[Membership], tmp_path: Path) -> None:
    rules = default_rules()
    rules.register(EventRule("rag.document.ingested", Level.TRUSTED, _validate_ingested))
    data = {"corpus": "family", "doc_cid": "blake3:ab", "title": "T", "language": "en", "chunks": 3}
    with EventLog(tmp_path / "rag.db", rules=rules) as rag_log:
        rag_log.set_community(log.community_id or "")
        assert len(rag_log.ingest(log.replay()).accepted) == 3
        event = rag_log.append_local(TRUSTY, "rag.document.ingested", data)
        assert rag_log.events_of_type("rag.document.ingested") == [event]
        with pytest.raises(Unauthorized):
            rag_log.append_local(MEMBER, "rag.document.ingested", data)
        with pytest.raises(BadRequest):
            rag_log.append_local(TRUSTY, "rag.document.ingested", {**data, "chunks": "3"})
    # the log without the rule does not know the type
    with pytest.raises(BadRequest):
        log.append_local(TRUSTY, "rag.document.ingested", data)


def test_registering_a_conflicting_rule_fails() -> None:
    rules = default_rules()
    with pytest.raises(BadRequest):
        rules.register(EventRule("member.invited", Level.MEMBER, _validate_ingested))


def test_events_from_another_community_are_refused(log: EventLog[Membership]) -> None:
    other = sign_event(
        FOUNDER,
        community_id="hc1:elsewhere",
        event_type="member.invited",
        data={"node_id": NEWBIE.node_id, "level": "member"},
        lamport=9,
        seq=9,
    )
    report = log.ingest([other])
    assert report.accepted == [] and report.rejected[0][1] == "bad_request"


def test_forged_founder_signature_over_reencoded_body_fails(log: EventLog[Membership]) -> None:
    created = log.replay()[0]
    fields = unpack_map(created.body)
    fields["name"] = "Other"
    with pytest.raises(InvalidSignature):
        Event.from_wire({"body": pack(fields), "sig": created.signature})


# -- backdating: restrictions judge the target's unseen events, whatever their Lamport time ---------


def _signed(
    author: Identity, log: EventLog[Membership], event_type: str, data: dict[str, Any], *, lamport: int
) -> Event:
    """``author``'s next event (by the log's version vector) at a Lamport time it picked."""
    seq = log.version_vector().get(author.node_id, 0) + 1
    return sign_event(
        author,
        community_id=log.community_id or "",
        event_type=event_type,
        data=data,
        lamport=lamport,
        seq=seq,
    )


def test_a_revoked_anchor_cannot_backdate_an_invite(log: EventLog[Membership]) -> None:
    log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "anchor"})
    early = log.lamport_clock
    for i in range(3):
        log.append_local(FOUNDER, "member.invited", {"node_id": _someone(i).node_id, "level": "member"})
    revocation = log.append_local(FOUNDER, "member.revoked", {"node_id": NEWBIE.node_id, "reason": "stolen"})
    assert revocation.data["cutoff_seq"] == 0
    puppet = _signed(
        NEWBIE, log, "member.invited", {"node_id": OUTSIDER.node_id, "level": "anchor"}, lamport=early
    )
    assert log.ingest([puppet]).accepted == [puppet]  # stored: NEWBIE was once an anchor
    m = log.membership()
    assert m.level_of(OUTSIDER.node_id) is None and not m.is_effective(puppet.event_id)


def test_a_revoked_trusted_members_backdated_document_has_no_effect(log: EventLog[Membership]) -> None:
    rules = default_rules()
    rules.register(EventRule("rag.document.ingested", Level.TRUSTED, _validate_ingested))
    with EventLog(Path(":memory:"), rules=rules) as rag_log:
        rag_log.set_community(log.community_id or "")
        rag_log.ingest(log.replay())
        invited_at = rag_log.lamport_clock
        rag_log.append_local(FOUNDER, "member.revoked", {"node_id": TRUSTY.node_id, "reason": "x"})
        data = {"corpus": "family", "doc_cid": "blake3:ab", "title": "T", "language": "en", "chunks": 3}
        doc = _signed(TRUSTY, rag_log, "rag.document.ingested", data, lamport=invited_at)
        assert rag_log.ingest([doc]).accepted == [doc]
        assert rag_log.events_of_type("rag.document.ingested", effective_only=True) == []


def test_what_the_revoker_had_seen_keeps_its_effect(log: EventLog[Membership]) -> None:
    """The trade-off: the target's events the revoker held stay; concurrent unseen ones are dropped."""
    seen = log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    unseen = _signed(
        TRUSTY,
        log,
        "member.invited",
        {"node_id": OUTSIDER.node_id, "level": "member"},
        lamport=seen.lamport + 1,
    )
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "trusted"})
    revocation = log.append_local(FOUNDER, "member.revoked", {"node_id": TRUSTY.node_id, "reason": "x"})
    assert revocation.data["cutoff_seq"] == 1 and unseen.key < revocation.key
    assert log.ingest([unseen]).accepted == [unseen]
    m = log.membership()
    assert m.is_effective(seen.event_id) and m.level_of(NEWBIE.node_id) is Level.MEMBER
    assert not m.is_effective(unseen.event_id) and m.level_of(OUTSIDER.node_id) is None


def test_a_demoted_anchor_is_judged_at_its_new_level_before_the_demotion(log: EventLog[Membership]) -> None:
    log.append_local(FOUNDER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "anchor"})
    granted = log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    for i in range(3):
        log.append_local(FOUNDER, "member.invited", {"node_id": _someone(i).node_id, "level": "member"})
    demotion = log.append_local(FOUNDER, "member.demoted", {"node_id": TRUSTY.node_id, "level": "trusted"})
    assert demotion.data["cutoff_seq"] == 1
    backdated = _signed(
        TRUSTY,
        log,
        "member.invited",
        {"node_id": OUTSIDER.node_id, "level": "anchor"},
        lamport=granted.lamport + 1,
    )
    assert backdated.key < demotion.key
    assert log.ingest([backdated]).accepted == [backdated]  # stored: TRUSTY was an anchor once
    m = log.membership()
    assert m.is_effective(granted.event_id) and not m.is_effective(backdated.event_id)
    assert m.level_of(OUTSIDER.node_id) is None
    # what the demoted member may still do at its new level takes effect
    as_trusted = _signed(
        TRUSTY,
        log,
        "member.invited",
        {"node_id": OUTSIDER.node_id, "level": "member"},
        lamport=granted.lamport + 2,
    )
    assert log.ingest([as_trusted]).accepted == [as_trusted]
    assert log.membership().level_of(OUTSIDER.node_id) is Level.MEMBER
    # a later promotion lifts the restriction for what comes after it
    log.append_local(FOUNDER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "anchor"})
    log.append_local(TRUSTY, "member.promoted", {"node_id": OUTSIDER.node_id, "level": "anchor"})
    assert log.membership().level_of(OUTSIDER.node_id) is Level.ANCHOR


def test_a_revoked_anchors_backdated_revocation_erases_nothing(log: EventLog[Membership]) -> None:
    """B, revoked with cutoff 0, signs "revoke A, cutoff 0" dated before its own revocation: void."""
    log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "anchor"})
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "anchor"})
    start = log.lamport_clock
    invite = log.append_local(NEWBIE, "member.invited", {"node_id": OUTSIDER.node_id, "level": "member"})
    log.append_local(FOUNDER, "member.revoked", {"node_id": MEMBER.node_id, "reason": "x"})
    revenge = _signed(
        MEMBER,
        log,
        "member.revoked",
        {"node_id": NEWBIE.node_id, "reason": "y", "cutoff_seq": 0},
        lamport=start,
    )
    assert log.ingest([revenge]).accepted == [revenge]
    m = log.membership()
    assert not m.is_effective(revenge.event_id) and not m.is_revoked(NEWBIE.node_id)
    assert m.is_effective(invite.event_id) and m.level_of(OUTSIDER.node_id) is Level.MEMBER


def test_anchors_revoking_each_other_in_a_cycle_settle_the_same_everywhere(tmp_path: Path) -> None:
    """Three anchors revoke each other concurrently, each unaware of the others: replay ends, agrees."""
    anchors = [NEWBIE, MEMBER, OUTSIDER]
    with EventLog(tmp_path / "src.db", rules=default_rules()) as src:
        src.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for a in anchors:
            src.append_local(FOUNDER, "member.invited", {"node_id": a.node_id, "level": "anchor"})
        base = src.lamport_clock
        cycle = [
            _signed(
                a,
                src,
                "member.revoked",
                {"node_id": anchors[(i + 1) % 3].node_id, "reason": "r", "cutoff_seq": 0},
                lamport=base + 1 + i,
            )
            for i, a in enumerate(anchors)
        ]
        assert len(src.ingest(cycle).accepted) == 3
        expected = src.membership().snapshot()
        assert expected == derive_membership(src.community_id or "", src.replay(), default_rules()).snapshot()
        for order in ([2, 1, 0], [1, 2, 0], [0, 2, 1]):
            with EventLog(Path(":memory:"), rules=default_rules()) as other:
                other.set_community(src.community_id or "")
                other.ingest(src.replay()[:4])
                for i in order:
                    other.ingest([cycle[i]])
                assert other.membership().snapshot() == expected


def _someone(i: int) -> Identity:
    return Identity.from_seed(bytes([0xC0, i]) * 16)


_FORGERS = [TRUSTY, MEMBER, NEWBIE]
_op = st.one_of(
    st.tuples(
        st.just("local"),
        st.sampled_from(["invite", "promote", "demote", "revoke"]),
        st.integers(0, 2),
        st.integers(0, 2),
    ),
    st.tuples(st.just("forge"), st.integers(0, 2), st.integers(0, 5), st.integers(-6, 3), st.integers(0, 2)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_op, min_size=3, max_size=25), st.integers(0, 2**32))
def test_backdated_events_never_beat_a_restriction_and_replay_is_order_free(
    ops: list[tuple[Any, ...]], seed: int
) -> None:
    """Members sign events at Lamport times they pick, anchors revoke and demote them."""
    rng = random.Random(seed)
    rules = default_rules()
    with EventLog(Path(":memory:"), rules=rules) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for who, level in zip(_FORGERS, ("anchor", "trusted", "anchor"), strict=True):
            log.append_local(FOUNDER, "member.invited", {"node_id": who.node_id, "level": level})
        for op in ops:
            if op[0] == "local":
                _, kind, target, level = op
                node_id = _FORGERS[target].node_id
                event_type, data = {
                    "invite": ("member.invited", {"node_id": node_id, "level": LEVELS[level]}),
                    "promote": ("member.promoted", {"node_id": node_id, "level": LEVELS[level]}),
                    "demote": ("member.demoted", {"node_id": node_id, "level": LEVELS[level]}),
                    "revoke": ("member.revoked", {"node_id": node_id, "reason": "r"}),
                }[kind]
                try:
                    log.append_local(FOUNDER, event_type, data)
                except BusError:
                    pass
            else:
                _, author, target, shift, level = op
                me = _FORGERS[author]
                own = log.version_vector().get(me.node_id, 0)
                last = max((e.lamport for e in log.replay() if e.author == me.node_id), default=0)
                lamport = max(last + 1, log.lamport_clock + shift)
                data = {"node_id": _someone(target).node_id, "level": LEVELS[level]}
                log.ingest(
                    [
                        sign_event(
                            me,
                            community_id=log.community_id or "",
                            event_type="member.invited",
                            data=data,
                            lamport=lamport,
                            seq=own + 1,
                        )
                    ]
                )
        events = log.replay()
        m = log.membership()
        # no event covered by an effective restriction takes effect
        for r in events:
            if r.event_type != "member.revoked" or not m.is_effective(r.event_id):
                continue
            for e in events:
                if e.author == r.data["node_id"] and e.seq > r.data["cutoff_seq"] and e.key < r.key:
                    assert not m.is_effective(e.event_id)
        # the result depends on the set only: any delivery order gives it
        shuffled = list(events)
        rng.shuffle(shuffled)
        assert derive_membership(log.community_id or "", events, rules).snapshot() == m.snapshot()
        with EventLog(Path(":memory:"), rules=rules) as other:
            other.set_community(log.community_id or "")
            pending = shuffled
            while pending:
                cut = rng.randint(1, len(pending))
                held = {e.event_id for e in other.ingest(pending[:cut]).accepted}
                if not held and cut == len(pending):
                    break
                pending = [e for e in pending if e.event_id not in held]
                rng.shuffle(pending)
            assert other.replay() == events
            assert other.membership().snapshot() == m.snapshot()
            assert other.lamport_clock == log.lamport_clock


def test_a_flood_of_backdated_revocations_costs_a_few_passes(tmp_path: Path) -> None:
    """A revoked anchor backdates 30 revocations of members with history: two passes, nothing erased."""
    targets = [_someone(i) for i in range(30)]
    invitees = [_someone(40 + i) for i in range(30)]
    with EventLog(tmp_path / "e.db", rules=default_rules()) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "anchor"})
        for t in targets:
            log.append_local(FOUNDER, "member.invited", {"node_id": t.node_id, "level": "trusted"})
        base = log.lamport_clock
        history = [
            _signed(
                t, log, "member.invited", {"node_id": u.node_id, "level": "member"}, lamport=base + 2 * i + 1
            )
            for i, (t, u) in enumerate(zip(targets, invitees, strict=True))
        ]
        assert len(log.ingest(history).accepted) == 30
        log.append_local(FOUNDER, "member.revoked", {"node_id": NEWBIE.node_id, "reason": "stolen"})
        flood = [
            sign_event(
                NEWBIE,
                community_id=log.community_id or "",
                event_type="member.revoked",
                data={"node_id": t.node_id, "reason": "r", "cutoff_seq": 0},
                lamport=base + 2 * i + 2,
                seq=i + 1,
            )
            for i, t in enumerate(targets)
        ]
        assert len(log.ingest(flood).accepted) == 30
        events = log.replay()
        passes: list[int] = []

        def counted() -> list[Event]:
            passes.append(1)
            return events

        m = derive_membership(log.community_id or "", counted, default_rules())
        assert len(passes) == 2  # one to weigh the restrictions, one replay: nothing to settle again
        assert m.snapshot() == log.membership().snapshot()
        assert not any(m.is_revoked(t.node_id) for t in targets)
        assert all(m.level_of(u.node_id) is Level.MEMBER for u in invitees)
        assert not any(m.is_effective(e.event_id) for e in flood)


@pytest.mark.parametrize("order", range(6))
def test_a_stolen_anchor_key_gains_nothing_by_backdating_against_two_revocations(
    tmp_path: Path, order: int
) -> None:
    """Anchors B and F both revoke A (having seen none of A's events). A backdates an invite of Z
    as anchor and a revocation of B. Neither may take effect, whatever order the events arrive in."""
    a, b, z = _someone(200), _someone(201), _someone(202)
    with EventLog(tmp_path / "e.db", rules=default_rules()) as log:
        log.append_local(FOUNDER, "community.created", {"name": "H", "founder": FOUNDER.node_id})
        log.append_local(FOUNDER, "member.invited", {"node_id": a.node_id, "level": "anchor"})
        log.append_local(FOUNDER, "member.invited", {"node_id": b.node_id, "level": "anchor"})
        cid = log.community_id or ""

        def ev(who: Identity, seq: int, lamport: int, event_type: str, data: dict[str, Any]) -> Event:
            return sign_event(
                who, community_id=cid, event_type=event_type, data=data, lamport=lamport, seq=seq
            )

        by_b = ev(b, 1, 100, "member.revoked", {"node_id": a.node_id, "reason": "stolen", "cutoff_seq": 0})
        by_f = ev(
            FOUNDER, 4, 300, "member.revoked", {"node_id": a.node_id, "reason": "stolen", "cutoff_seq": 0}
        )
        invite_z = ev(a, 1, 50, "member.invited", {"node_id": z.node_id, "level": "anchor"})
        revoke_b = ev(
            a, 2, 90, "member.revoked", {"node_id": b.node_id, "reason": "revenge", "cutoff_seq": 0}
        )
        batches = [[by_b], [by_f], [invite_z, revoke_b]]
        order_of = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)][order]
        for i in order_of:
            assert len(log.ingest(batches[i]).accepted) == len(batches[i])
        m = log.membership()
        assert m.snapshot() == derive_membership(cid, log.replay(), default_rules()).snapshot()
        assert m.is_revoked(a.node_id)
        assert not m.is_revoked(b.node_id) and m.level_of(b.node_id) == Level.ANCHOR
        assert m.level_of(z.node_id) is None
        assert not m.is_effective(invite_z.event_id) and not m.is_effective(revoke_b.event_id)
