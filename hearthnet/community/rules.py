"""The community's own event types: who may emit them and what their data must look like, and
how they fold into the membership (:class:`MembershipModel`), which the event log is given
through :func:`default_rules` (the events layer itself knows none of this)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.community.membership import (
    CREATED,
    DEMOTED,
    INVITED,
    PROMOTED,
    RESTRICTING,
    REVOKED,
    Membership,
    community_id_for,
    derive_membership,
)
from hearthnet.errors import BadRequest, Revoked, Unauthorized
from hearthnet.events.envelope import MAX_LAMPORT, Event
from hearthnet.events.rules import EventRule, EventRules, require_fields
from hearthnet.identity.keys import public_key_from_node_id

__all__ = ["MEMBERSHIP", "MembershipModel", "default_rules"]

_MAX_NAME = 128
_MAX_REASON = 1000


def _node_id(value: str, what: str) -> None:
    try:
        public_key_from_node_id(value)
    except BadRequest as exc:
        raise BadRequest(f"{what}: {exc.message}") from exc


def _level(value: str) -> Level:
    if value not in ("member", "trusted", "anchor"):
        raise BadRequest(f"level must be member, trusted or anchor, got {value!r:.20}")
    return Level.parse(value)


def _validate_created(data: Mapping[str, Any]) -> None:
    require_fields(data, {"name": str, "founder": str})
    if not 0 < len(data["name"]) <= _MAX_NAME:
        raise BadRequest(f"community name must have 1..{_MAX_NAME} characters")
    _node_id(data["founder"], "founder")


def _cutoff(data: Mapping[str, Any]) -> None:
    if not 0 <= data["cutoff_seq"] <= MAX_LAMPORT:
        raise BadRequest("cutoff_seq must be an integer in [0, 2^53)")


def _validate_invited(data: Mapping[str, Any]) -> None:
    require_fields(data, {"node_id": str, "level": str})
    _node_id(data["node_id"], "node_id")
    _level(data["level"])


def _validate_level_change(data: Mapping[str, Any]) -> None:
    require_fields(data, {"node_id": str, "level": str, "cutoff_seq": int})
    _node_id(data["node_id"], "node_id")
    _level(data["level"])
    _cutoff(data)


def _validate_revoked(data: Mapping[str, Any]) -> None:
    require_fields(data, {"node_id": str, "reason": str, "cutoff_seq": int})
    _node_id(data["node_id"], "node_id")
    _cutoff(data)
    if len(data["reason"]) > _MAX_REASON:
        raise BadRequest(f"revocation reason is limited to {_MAX_REASON} characters")


# -- authorisation and preconditions --------------------------------------------
def _authorize_created(event: Event, _level_: Level | None) -> None:
    founder = event.data["founder"]
    if founder != event.author:
        raise Unauthorized("community.created must be signed by its founder")
    if community_id_for(founder, event.data["name"]) != event.community_id:
        raise Unauthorized("community id is not derived from the founder's key and name")


def _precondition_created(event: Event, membership: Membership) -> None:
    if membership.founder is not None:
        raise BadRequest("the community already exists; only the first community.created counts")


def _authorize_invited(event: Event, level: Level | None) -> None:
    if (level is None or level < Level.ANCHOR) and _level(event.data["level"]) > Level.MEMBER:
        raise Unauthorized("only an anchor may invite at level trusted or anchor")


def _precondition_invited(event: Event, membership: Membership) -> None:
    target = event.data["node_id"]
    if membership.is_revoked(target):
        raise Revoked(f"{target} was revoked; revocation is permanent")
    level = membership.level_of(target)
    if level is not None:
        raise BadRequest(f"{target} is already a member ({level.label}); its level changes by promotion")


def _current_level(target: str, membership: Membership) -> Level:
    """The level of ``target``, which must be a current member (promotion, demotion, revocation)."""
    level = membership.level_of(target)
    if level is None:
        if membership.is_revoked(target):
            raise BadRequest(f"{target} is already revoked")
        raise BadRequest(f"{target} is not a member of this community")
    return level


def _precondition_promoted(event: Event, membership: Membership) -> None:
    target = event.data["node_id"]
    level = _current_level(target, membership)
    if _level(event.data["level"]) <= level:
        raise BadRequest(f"{target} is {level.label}; a promotion must raise the level")


def _precondition_demoted(event: Event, membership: Membership) -> None:
    target = event.data["node_id"]
    if target == membership.founder:
        raise Unauthorized("the founder stays an anchor: its level cannot be lowered")
    level = _current_level(target, membership)
    if _level(event.data["level"]) >= level:
        raise BadRequest(f"{target} is {level.label}; a demotion must lower the level")


def _precondition_revoked(event: Event, membership: Membership) -> None:
    target = event.data["node_id"]
    if target == membership.founder:
        raise Unauthorized("the founder cannot be revoked")
    _current_level(target, membership)


class MembershipModel:
    """How the community's events fold into its :class:`Membership` (the log's model)."""

    founding_type: str = CREATED
    cutoff_types: tuple[str, ...] = (*RESTRICTING, PROMOTED)
    """A promotion's ``cutoff_seq`` restricts nothing; it is kept for its shape."""
    grant_types: tuple[str, ...] = (INVITED, PROMOTED)

    def community_id_for(self, founder: str, name: str) -> str:
        return community_id_for(founder, name)

    def empty(self, community_id: str) -> Membership:
        return Membership(community_id)

    def derive(
        self,
        community_id: str,
        events: Iterable[Event] | Callable[[], Iterable[Event]],
        rules: EventRules[Membership],
    ) -> Membership:
        return derive_membership(community_id, events, rules)


MEMBERSHIP = MembershipModel()


def default_rules() -> EventRules[Membership]:
    """Rules with the community event types registered (a service's own types are added to them)."""
    rules: EventRules[Membership] = EventRules(MEMBERSHIP)
    rules.register(
        EventRule(
            CREATED,
            Level.ANCHOR,
            _validate_created,
            authorize=_authorize_created,
            precondition=_precondition_created,
            founding=True,
        )
    )
    rules.register(
        EventRule(
            INVITED,
            Level.TRUSTED,
            _validate_invited,
            authorize=_authorize_invited,
            precondition=_precondition_invited,
        )
    )
    rules.register(
        EventRule(PROMOTED, Level.ANCHOR, _validate_level_change, precondition=_precondition_promoted)
    )
    rules.register(
        EventRule(DEMOTED, Level.ANCHOR, _validate_level_change, precondition=_precondition_demoted)
    )
    rules.register(EventRule(REVOKED, Level.ANCHOR, _validate_revoked, precondition=_precondition_revoked))
    return rules
