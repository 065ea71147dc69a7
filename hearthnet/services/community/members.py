"""What ``hearthnet invite`` and ``hearthnet member promote|demote|revoke`` may do, checked
before an event is signed, with messages in the CLI's terms.

The event rules (:mod:`hearthnet.events.rules`) decide what takes effect; these checks
run first on this node's own view, so that a mistyped id, a level in the wrong direction
or a missing right is one clear ``bad_request``/``unauthorized`` naming the command that
does what the user meant, and nothing is appended.
"""

from __future__ import annotations

from dataclasses import dataclass

from hearthnet.community.levels import Level
from hearthnet.community.membership import Membership
from hearthnet.errors import BadRequest, Revoked, Unauthorized

__all__ = ["Standing", "check_demote", "check_invite", "check_promote", "check_revoke", "standing"]


@dataclass(frozen=True)
class Standing:
    """This node's and a target's place in the community, read from one membership."""

    own: Level | None
    own_revoked: bool
    own_id: str
    target_id: str
    target: Level | None
    target_revoked: bool
    founder: str | None


def standing(membership: Membership, own_id: str, target_id: str) -> Standing:
    return Standing(
        own=membership.level_of(own_id),
        own_revoked=membership.is_revoked(own_id),
        own_id=own_id,
        target_id=target_id,
        target=membership.level_of(target_id),
        target_revoked=membership.is_revoked(target_id),
        founder=membership.founder,
    )


def _require_own(s: Standing, needed: Level, command: str) -> None:
    if s.own_revoked:
        raise Revoked("this node was revoked from the community: it can no longer change the membership")
    if s.own is None or s.own < needed:
        have = s.own.label if s.own is not None else "not a member"
        raise Unauthorized(f"'{command}' needs level {needed.label}; this node is {have}")


def _require_member(s: Standing) -> Level:
    if s.target_revoked:
        raise BadRequest(f"{s.target_id} is already revoked")
    if s.target is None:
        raise BadRequest(f"{s.target_id} is not a member of this community")
    return s.target


def check_invite(s: Standing, level: Level) -> bool:
    """Trusted members invite members; anchors invite at any level; never a revoked node.

    True when the target is a member already at ``level``: the invite is a fresh token for it
    (its owner lost the first, or its ``join`` failed), and no new event is signed.  A member at
    another level is refused with the command that changes a level.
    """
    _require_own(s, Level.TRUSTED, "hearthnet invite")
    if level > Level.MEMBER and s.own is not None and s.own < Level.ANCHOR:
        raise Unauthorized(f"only an anchor may invite at level {level.label}; this node is {s.own.label}")
    if s.target_revoked:
        raise Revoked(f"{s.target_id} was revoked; revocation is permanent, it cannot be invited again")
    if s.target_id == s.own_id:
        raise BadRequest("that is this node's own id: give the id the other node's 'hearthnet init' printed")
    if s.target_id == s.founder:
        raise BadRequest(f"{s.target_id} founded this community: it needs no invite")
    if s.target is None:
        return False
    if level == s.target:
        return True
    change = "promote" if level > s.target else "demote"
    raise BadRequest(
        f"{s.target_id} is already a member ({s.target.label}): to make it {level.label} run "
        f"'hearthnet member {change} {s.target_id} --level {level.label}'; for a fresh token at its "
        f"level run 'hearthnet invite {s.target_id} --level {s.target.label}'"
    )


def check_promote(s: Standing, level: Level) -> None:
    """Only raises a current member's level."""
    _require_own(s, Level.ANCHOR, "hearthnet member promote")
    current = _require_member(s)
    if level < current:
        raise BadRequest(
            f"{s.target_id} is {current.label}; 'member promote' only raises a level: to lower it "
            f"run 'hearthnet member demote {s.target_id} --level {level.label}'"
        )
    if level == current:
        raise BadRequest(
            f"{s.target_id} is {current.label} already; 'member promote' only raises a level "
            "('hearthnet member demote' lowers one)"
        )


def check_demote(s: Standing, level: Level) -> None:
    """Only lowers a current member's level; the founder stays an anchor."""
    _require_own(s, Level.ANCHOR, "hearthnet member demote")
    if s.target_id == s.founder:
        raise Unauthorized("the founder stays an anchor: its level cannot be lowered")
    current = _require_member(s)
    if level > current:
        raise BadRequest(
            f"{s.target_id} is {current.label}; 'member demote' only lowers a level: to raise it "
            f"run 'hearthnet member promote {s.target_id} --level {level.label}'"
        )
    if level == current:
        lower = (
            f"to remove it from the community run 'hearthnet member revoke {s.target_id}'"
            if current == Level.MEMBER
            else "give a lower --level"
        )
        raise BadRequest(f"{s.target_id} is {current.label} already: {lower}")


def check_revoke(s: Standing) -> None:
    """Only a current member, never the founder."""
    _require_own(s, Level.ANCHOR, "hearthnet member revoke")
    if s.target_id == s.founder:
        raise Unauthorized("the founder cannot be revoked")
    _require_member(s)
