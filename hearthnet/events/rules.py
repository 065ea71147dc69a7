"""Who may emit which event type, and what its data must look like.

Event types are extensible: services register their own :class:`EventRule`.
Every node of a community must register the same rules (including those of
services it does not run), otherwise nodes disagree about what to store.

Two checks use the same rules:

* :meth:`EventRules.check` — *effective* validity at a point of the replay
  (current level, revocations, community state, and the known restrictions
  that cover the event: see :mod:`hearthnet.community.membership`).  Used by
  ``append_local`` and by membership derivation.
* :meth:`EventRules.admit` — *admission* for storage and replication, judged
  against the monotone admission view (highest level ever granted).  An event
  admitted by one node is admitted by every node holding at least the same
  earlier events, which is what makes gossip converge on one set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.community.membership import (
    CREATED,
    DEMOTED,
    INVITED,
    PROMOTED,
    REVOKED,
    Membership,
    community_id_for,
)
from hearthnet.errors import BadRequest, BusError, Revoked, Unauthorized
from hearthnet.events.envelope import MAX_LAMPORT, Event
from hearthnet.identity.keys import public_key_from_node_id

__all__ = ["EventRule", "EventRules", "default_rules", "require_fields"]

_MAX_NAME = 128
_MAX_REASON = 1000


@dataclass(frozen=True)
class EventRule:
    """The rule for one event type.

    ``authorize(event, author_level)`` is an optional extra check that depends
    only on the event and its author's level (``None`` for founding events); it
    must be monotone: a higher level never turns an accepted event into a
    refused one.  ``precondition(event, membership)`` optionally checks the
    community state (effective check only).  ``founding`` marks the one type
    that non-members may emit (``community.created``).
    """

    event_type: str
    min_level: Level
    validate: Callable[[Mapping[str, Any]], None]
    authorize: Callable[[Event, Level | None], None] | None = None
    precondition: Callable[[Event, Membership], None] | None = None
    founding: bool = False


class EventRules:
    """A registry of :class:`EventRule` by event type."""

    def __init__(self) -> None:
        self._rules: dict[str, EventRule] = {}

    def register(self, rule: EventRule) -> None:
        existing = self._rules.get(rule.event_type)
        if existing is not None and existing != rule:
            raise BadRequest(f"event type {rule.event_type!r} already has a different rule")
        self._rules[rule.event_type] = rule

    def get(self, event_type: str) -> EventRule:
        rule = self._rules.get(event_type)
        if rule is None:
            raise BadRequest(f"unknown event type {event_type!r}")
        return rule

    def __contains__(self, event_type: object) -> bool:
        return event_type in self._rules

    def event_types(self) -> list[str]:
        return sorted(self._rules)

    def check(self, event: Event, membership: Membership) -> None:
        """Raise unless ``event`` takes effect on top of ``membership``."""
        rule = self._common(event, membership)
        level: Level | None = None
        if not rule.founding:
            revoked, level = membership.standing(event)
            if revoked:
                raise Revoked(f"{event.author} has been revoked from the community")
            if level is None:
                raise Unauthorized(f"{event.author} is not a member of the community")
            if level < rule.min_level:
                raise Unauthorized(
                    f"{event.event_type} needs level {rule.min_level.label}; the author is {level.label}"
                )
        if rule.authorize is not None:
            rule.authorize(event, level)
        if rule.precondition is not None:
            rule.precondition(event, membership)

    def admit(self, event: Event, membership: Membership) -> None:
        """Raise unless ``event`` may be stored and replicated (monotone admission)."""
        rule = self._common(event, membership)
        level: Level | None = None
        if not rule.founding:
            level = membership.ever_level(event.author)
            if level is None:
                raise Unauthorized(f"{event.author} was never admitted to the community")
            if level < rule.min_level:
                raise Unauthorized(
                    f"{event.event_type} needs level {rule.min_level.label}; "
                    f"the author was never above {level.label}"
                )
        if rule.authorize is not None:
            rule.authorize(event, level)

    def _common(self, event: Event, membership: Membership) -> EventRule:
        if event.community_id != membership.community_id:
            raise BadRequest("event belongs to another community")
        return self.validate(event)

    def validate(self, event: Event) -> EventRule:
        """The event's rule, once its type is known and its data valid (no state needed)."""
        rule = self.get(event.event_type)
        try:
            rule.validate(event.data)
        except BadRequest:
            raise
        except BusError as exc:
            raise BadRequest(f"{event.event_type} data: {exc.message}") from exc
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise BadRequest(f"{event.event_type} data invalid: {type(exc).__name__}") from exc
        return rule


# -- data validators -----------------------------------------------------------
def require_fields(data: Mapping[str, Any], spec: Mapping[str, type]) -> None:
    """Check that ``data`` has exactly the keys of ``spec`` with those types."""
    if set(data) != set(spec):
        raise BadRequest(f"data fields must be {sorted(spec)}, got {sorted(data)[:10]}")
    for name, kind in spec.items():
        value = data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise BadRequest(f"data field {name!r} must be {kind.__name__}")


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


def default_rules() -> EventRules:
    """Rules with the community event types registered."""
    rules = EventRules()
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
