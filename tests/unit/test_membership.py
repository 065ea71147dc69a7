"""Membership derived from the log: rights per level, revocation, forged founding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.community import Level, community_id_for, derive_membership
from hearthnet.community.membership import Membership
from hearthnet.errors import BadRequest, InvalidSignature, Revoked, Unauthorized
from hearthnet.events import Event, EventLog, EventRule, default_rules, require_fields, sign_event
from hearthnet.identity.keys import Identity
from hearthnet.wire.codec import pack, unpack_map

FOUNDER = Identity.from_seed(b"F" * 32)
TRUSTY = Identity.from_seed(b"T" * 32)
MEMBER = Identity.from_seed(b"M" * 32)
NEWBIE = Identity.from_seed(b"N" * 32)
OUTSIDER = Identity.from_seed(b"O" * 32)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    log = EventLog(tmp_path / "events.db", rules=default_rules())
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": TRUSTY.node_id, "level": "trusted"})
    log.append_local(FOUNDER, "member.invited", {"node_id": MEMBER.node_id, "level": "member"})
    yield log
    log.close()


def test_founder_is_anchor_and_community_id_is_derived(log: EventLog) -> None:
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


def test_member_cannot_invite_or_revoke(log: EventLog) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.revoked", {"node_id": TRUSTY.node_id, "reason": "x"})
    assert log.count() == 3


def test_outsider_cannot_write(log: EventLog) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(OUTSIDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})


def test_trusted_invites_members_but_not_trusted(log: EventLog) -> None:
    with pytest.raises(Unauthorized):
        log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "trusted"})
    with pytest.raises(Unauthorized):
        log.append_local(TRUSTY, "member.promoted", {"node_id": MEMBER.node_id, "level": "trusted"})
    log.append_local(TRUSTY, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
    info = log.membership().members()[NEWBIE.node_id]
    assert info.level is Level.MEMBER and info.invited_by == TRUSTY.node_id


def test_invite_of_current_member_is_refused(log: EventLog) -> None:
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.invited", {"node_id": MEMBER.node_id, "level": "anchor"})


def test_anchor_promotes_and_demotes(log: EventLog) -> None:
    log.append_local(FOUNDER, "member.promoted", {"node_id": MEMBER.node_id, "level": "anchor"})
    assert log.membership().level_of(MEMBER.node_id) is Level.ANCHOR
    log.append_local(MEMBER, "member.promoted", {"node_id": TRUSTY.node_id, "level": "member"})
    assert log.membership().level_of(TRUSTY.node_id) is Level.MEMBER
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, "member.promoted", {"node_id": FOUNDER.node_id, "level": "member"})
    with pytest.raises(BadRequest):
        log.append_local(FOUNDER, "member.promoted", {"node_id": OUTSIDER.node_id, "level": "member"})


def test_revocation_is_permanent_and_ignores_later_events(log: EventLog) -> None:
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


def test_founder_cannot_be_revoked(log: EventLog) -> None:
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


def test_bad_data_and_unknown_types_are_bad_request(log: EventLog) -> None:
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


def test_service_registers_its_own_event_type(log: EventLog, tmp_path: Path) -> None:
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


def test_events_from_another_community_are_refused(log: EventLog) -> None:
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


def test_forged_founder_signature_over_reencoded_body_fails(log: EventLog) -> None:
    created = log.replay()[0]
    fields = unpack_map(created.body)
    fields["name"] = "Other"
    with pytest.raises(InvalidSignature):
        Event.from_wire({"body": pack(fields), "sig": created.signature})
