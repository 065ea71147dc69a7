"""A node learning its own revocation from the event a refusing peer shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.community.membership import Membership
from hearthnet.community.revocation import own_revocation
from hearthnet.community.rules import default_rules
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.events import Event, EventLog, sign_event
from hearthnet.identity.keys import Identity
from hearthnet.services.community.notice import OwnRevocation

FOUNDER = Identity.from_seed(b"F" * 32)
ANCHOR = Identity.from_seed(b"A" * 32)
TRUSTY = Identity.from_seed(b"T" * 32)
PHONE = Identity.from_seed(b"P" * 32)
OTHER = Identity.from_seed(b"O" * 32)


@pytest.fixture
def anchor_log(tmp_path: Path) -> Iterator[EventLog[Membership]]:
    """The community as an anchor sees it: the phone revoked after the phone went away."""
    log = EventLog(tmp_path / "anchor.db", rules=default_rules())
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    log.append_local(FOUNDER, "member.invited", {"node_id": ANCHOR.node_id, "level": "anchor"})
    log.append_local(FOUNDER, "member.invited", {"node_id": TRUSTY.node_id, "level": "trusted"})
    log.append_local(FOUNDER, "member.invited", {"node_id": PHONE.node_id, "level": "trusted"})
    log.append_local(FOUNDER, "member.invited", {"node_id": OTHER.node_id, "level": "member"})
    yield log
    log.close()


def _phone_log(path: Path, source: EventLog[Membership]) -> EventLog[Membership]:
    """The phone's log: everything ``source`` holds now."""
    log = EventLog(path, rules=default_rules())
    log.set_community(source.community_id or "")
    assert len(log.ingest(source.replay()).accepted) == source.count()
    return log


def _forged(author: Identity, log: EventLog[Membership], target: str) -> Event:
    return sign_event(
        author,
        community_id=log.community_id or "",
        event_type="member.revoked",
        data={"node_id": target, "reason": "trust me", "cutoff_seq": 0},
        lamport=log.lamport_clock + 1,
        seq=log.version_vector().get(author.node_id, 0) + 1,
    )


def test_only_an_anchors_revocation_of_this_very_node_is_taken(
    anchor_log: EventLog[Membership], tmp_path: Path
) -> None:
    phone = _phone_log(tmp_path / "phone.db", anchor_log)
    membership = phone.membership()
    real = anchor_log.append_local(ANCHOR, "member.revoked", {"node_id": PHONE.node_id, "reason": "lost"})
    shown = own_revocation(real, PHONE.node_id, membership)
    assert (shown.by, shown.at_ms, shown.reason, shown.event) == (
        ANCHOR.node_id,
        real.wall_clock,
        "lost",
        real,
    )
    with pytest.raises(BadRequest, match="names another node"):
        own_revocation(real, OTHER.node_id, membership)
    with pytest.raises(Unauthorized, match="not known here as an anchor"):  # a trusted member's forgery
        own_revocation(_forged(TRUSTY, phone, PHONE.node_id), PHONE.node_id, membership)
    invite = anchor_log.append_local(
        ANCHOR, "member.invited", {"node_id": Identity.generate().node_id, "level": "member"}
    )
    with pytest.raises(BadRequest, match="a revocation was expected"):
        own_revocation(invite, PHONE.node_id, membership)
    elsewhere = sign_event(
        ANCHOR,
        community_id="hc1:another",
        event_type="member.revoked",
        data={"node_id": PHONE.node_id, "reason": "x", "cutoff_seq": 0},
        lamport=1,
        seq=1,
    )
    with pytest.raises(BadRequest, match="another community"):
        own_revocation(elsewhere, PHONE.node_id, membership)
    phone.close()


def test_a_revocation_that_continues_the_log_is_stored_in_it(
    anchor_log: EventLog[Membership], tmp_path: Path
) -> None:
    phone = _phone_log(tmp_path / "phone.db", anchor_log)
    notice = OwnRevocation(PHONE.node_id, phone, tmp_path / "revoked.json")
    assert notice.current() is None
    real = anchor_log.append_local(FOUNDER, "member.revoked", {"node_id": PHONE.node_id, "reason": "lost"})
    assert notice.learn(real) is True
    assert phone.membership().is_revoked(PHONE.node_id) and phone.get(real.event_id) == real
    assert not (tmp_path / "revoked.json").exists()  # the log holds it
    current = notice.current()
    assert current is not None and current.by == FOUNDER.node_id and current.reason == "lost"
    assert notice.learn(real) is False  # nothing new
    phone.close()


def test_a_revocation_the_log_cannot_store_is_kept_in_the_home_across_restarts(
    anchor_log: EventLog[Membership], tmp_path: Path
) -> None:
    phone = _phone_log(tmp_path / "phone.db", anchor_log)
    path = tmp_path / "revoked.json"
    # the anchor wrote more after the phone left: the revocation is out of sequence for the phone
    anchor_log.append_local(
        ANCHOR, "member.invited", {"node_id": Identity.generate().node_id, "level": "member"}
    )
    real = anchor_log.append_local(ANCHOR, "member.revoked", {"node_id": PHONE.node_id, "reason": "lost"})
    notice = OwnRevocation(PHONE.node_id, phone, path)
    with pytest.raises(Unauthorized):
        notice.learn(_forged(TRUSTY, phone, PHONE.node_id))
    assert notice.current() is None and not path.exists()
    assert notice.learn(real) is True
    assert phone.get(real.event_id) is None and not phone.membership().is_revoked(PHONE.node_id)
    current = notice.current()
    assert current is not None and current.by == ANCHOR.node_id and current.event == real
    again = OwnRevocation(PHONE.node_id, phone, path)
    again.load()
    assert again.current() == current
    # a damaged or tampered file is ignored (logged), never a crash at start
    saved = json.loads(path.read_text())
    for text in ("{", json.dumps({"event": {"body": saved["event"]["body"], "sig": "AAAA"}})):
        path.write_text(text)
        damaged = OwnRevocation(PHONE.node_id, phone, path)
        damaged.load()
        assert damaged.current() is None
    phone.close()


def test_a_revocation_that_arrives_by_gossip_is_the_one_shown(
    anchor_log: EventLog[Membership], tmp_path: Path
) -> None:
    """Before the cut, gossip may bring the revocation itself: the log's copy is used as it is."""
    phone = _phone_log(tmp_path / "phone.db", anchor_log)
    notice = OwnRevocation(PHONE.node_id, phone, tmp_path / "revoked.json")
    real = anchor_log.append_local(ANCHOR, "member.revoked", {"node_id": PHONE.node_id, "reason": "sold"})
    assert phone.ingest([real]).accepted == [real]  # as a pull from a peer stores it
    current = notice.current()
    assert current is not None and (current.by, current.reason, current.event) == (
        ANCHOR.node_id,
        "sold",
        real,
    )
    assert not (tmp_path / "revoked.json").exists()
    phone.close()
