"""Who may emit which event type, and what its data must look like; and what the log replays its
events into.  The community's own types and its membership model are injected from above
(:mod:`hearthnet.community.rules`): this layer knows no event type and no trust level.

Event types are extensible: services register their own :class:`EventRule`.
Every node of a community must register the same rules (including those of
services it does not run), otherwise nodes disagree about what to store.

Two checks use the same rules:

* :meth:`EventRules.check` — *effective* validity at a point of the replay
  (current level, revocations, community state, and the known restrictions
  that cover the event).  Used by ``append_local`` and by the derivation.
* :meth:`EventRules.admit` — *admission* for storage and replication, judged
  against the monotone admission view (highest level ever granted).  An event
  admitted by one node is admitted by every node holding at least the same
  earlier events, which is what makes gossip converge on one set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from hearthnet.errors import BadRequest, BusError, Revoked, Unauthorized
from hearthnet.events.envelope import Event

__all__ = ["EventRule", "EventRules", "LogState", "Rank", "StateModel", "require_fields"]


class Rank(Protocol):
    """A trust level as the rules compare it: ordered, with a name to show."""

    @property
    def label(self) -> str: ...

    def __lt__(self, other: Any, /) -> bool: ...


class LogState(Protocol):
    """The state a log's events replay into (the community's membership): what the rules and the
    log ask of it."""

    @property
    def community_id(self) -> str: ...

    @property
    def founder(self) -> str | None: ...

    @property
    def needs_replay(self) -> bool:
        """The state is provisional: a restriction turned up, and only a full replay resolves it."""
        ...

    def standing(self, event: Event) -> tuple[bool, Rank | None]:
        """``(revoked, level)`` of the event's author where the event replays."""
        ...

    def ever_level(self, node_id: str) -> Rank | None:
        """The highest level ever granted (the monotone admission view)."""
        ...

    def is_effective(self, event_id: str) -> bool: ...

    def clock(self) -> int:
        """The highest Lamport time of an event whose author is in good standing."""
        ...

    def apply(self, event: Event, rules: Any) -> bool:
        """Replay one more event; False if it takes no effect."""
        ...

    def copy(self) -> Self: ...


S = TypeVar("S", bound=LogState)


class StateModel(Protocol[S]):
    """How a community's events fold into its state, and which types mean what to the log."""

    @property
    def founding_type(self) -> str:
        """The one type a non-member may emit: it founds the community (and binds the log to it)."""
        ...

    @property
    def cutoff_types(self) -> tuple[str, ...]:
        """Types whose data carries ``cutoff_seq`` (the target's events up to it are what it saw)."""
        ...

    @property
    def grant_types(self) -> tuple[str, ...]:
        """Types that admit or raise a node (``data.node_id``): they make an author admissible."""
        ...

    def community_id_for(self, founder: str, name: str) -> str: ...

    def empty(self, community_id: str) -> S: ...

    def derive(
        self,
        community_id: str,
        events: Iterable[Event] | Callable[[], Iterable[Event]],
        rules: EventRules[S],
    ) -> S: ...


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
    min_level: Rank
    validate: Callable[[Mapping[str, Any]], None]
    authorize: Callable[[Event, Any], None] | None = None
    """``(event, the author's level or None)``."""
    precondition: Callable[[Event, Any], None] | None = None
    """``(event, the state where it replays)``."""
    founding: bool = False


class EventRules(Generic[S]):
    """A registry of :class:`EventRule` by event type, with the model the log replays them into."""

    def __init__(self, model: StateModel[S]) -> None:
        self.model = model
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

    def check(self, event: Event, membership: S) -> None:
        """Raise unless ``event`` takes effect on top of ``membership``."""
        rule = self._common(event, membership)
        level: Rank | None = None
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

    def admit(self, event: Event, membership: S) -> None:
        """Raise unless ``event`` may be stored and replicated (monotone admission)."""
        rule = self._common(event, membership)
        level: Rank | None = None
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

    def _common(self, event: Event, membership: S) -> EventRule:
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
