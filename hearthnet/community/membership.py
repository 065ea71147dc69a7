"""Community membership derived from the signed event log (pure, no I/O).

Replaying events in ``(lamport, event_id)`` order and ignoring every event
whose author lacked the right at its position makes the derived state a
deterministic function of the *set* of events.

Two views are kept:

* the **effective** state (``level_of``, ``members``, ``is_revoked``): what the
  community rules say after replay; this is what handshakes and calls use;
* the **admission** view (``ever_level``): the highest level a node has ever
  been granted by an admissible grant, ignoring revocations and demotions.  It
  only grows as events are added, so the log uses it to decide what to *store*
  and replicate: every node then stores the same set regardless of arrival
  order, and the effective state, computed from that set, agrees everywhere.

Backdating.  An author picks its own Lamport times, so a revoked (or demoted)
node could sign an event that replays *before* its revocation.  A
``member.revoked`` and a ``member.demoted`` therefore carry
``cutoff_seq``: the target's sequence number up to which the issuer held its
events.  A *restriction* is such an event that takes effect; the target's
events with ``seq > cutoff_seq`` that replay before it are judged as if the
restriction had already happened (revoked: no effect; demoted: at most the
new level).  Which restrictions hold is settled before replay, from the
events alone: restriction R *attacks* restriction Q when R revokes (or demotes
below anchor) Q's issuer and Q has a later seq than R's cutoff — Q is one of
the events R voids.  The restrictions that hold are the grounded extension of
that attack graph (one holds when every attacker of it is out, is out when an
attacker holds); a cycle left open (two anchors revoking each other, each
unseen by the other) is broken by letting the earliest one in replay order
hold.  Replay then runs with those restrictions known from the start; one
that does not take effect after all (its issuer lacked the right for another
reason, a "demotion" that does not lower) is dropped from the candidates and
the whole is settled again.  Candidates only ever leave, so this ends, and
every step is a function of the set of events.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hearthnet.community.levels import Level
from hearthnet.errors import BusError
from hearthnet.identity.keys import public_key_from_node_id

if TYPE_CHECKING:
    from hearthnet.events.envelope import Event
    from hearthnet.events.rules import EventRules

__all__ = [
    "COMMUNITY_ID_PREFIX",
    "MemberInfo",
    "Membership",
    "Restriction",
    "Revocation",
    "community_id_for",
    "derive_membership",
]

COMMUNITY_ID_PREFIX = "hc1:"

CREATED = "community.created"
INVITED = "member.invited"
PROMOTED = "member.promoted"
DEMOTED = "member.demoted"
REVOKED = "member.revoked"
RESTRICTING = (REVOKED, DEMOTED)
"""The event types that restrict their target (and carry ``cutoff_seq``)."""


def community_id_for(founder_node_id: str, name: str) -> str:
    """``hc1:`` + base64url(blake2b-128(founder public key || name utf-8))."""
    key = public_key_from_node_id(founder_node_id)
    digest = hashlib.blake2b(key + name.encode("utf-8"), digest_size=16).digest()
    return COMMUNITY_ID_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class MemberInfo:
    node_id: str
    level: Level
    invited_by: str
    since_lamport: int


@dataclass(frozen=True)
class Revocation:
    """The revocation that took effect for ``node_id``: who signed it, when (its author's
    wall clock, ms), why, and the signed event itself (a revoked node is shown it)."""

    node_id: str
    by: str
    at_ms: int
    reason: str
    event: Event


@dataclass(frozen=True)
class Restriction:
    """An effective revocation (``level is None``) or demotion of ``target``."""

    event_id: str
    key: tuple[int, str]
    target: str
    cutoff_seq: int
    level: Level | None

    def covers(self, event: Event) -> bool:
        """True for the target's events the issuer had not seen that replay before it."""
        return event.author == self.target and event.seq > self.cutoff_seq and event.key < self.key


class Membership:
    """The state of one community at some point of the replay."""

    def __init__(
        self,
        community_id: str,
        *,
        known: Iterable[Restriction] = (),
        considered: Iterable[str] = (),
    ) -> None:
        self.community_id = community_id
        self.name: str | None = None
        self.founder: str | None = None
        self._members: dict[str, MemberInfo] = {}
        self._revoked: set[str] = set()
        self._revocations: dict[str, Revocation] = {}
        self._ever: dict[str, Level] = {}
        self._ignored: set[str] = set()
        self._known: dict[str, Restriction] = {r.event_id: r for r in known}
        self._known_by_target: dict[str, list[Restriction]] = {}
        for r in self._known.values():
            self._known_by_target.setdefault(r.target, []).append(r)
        self._considered: set[str] = set(considered)
        """Restriction events the derivation weighed (held or not); any other one met means replay again."""
        self._applied_seq: dict[str, int] = {}  # author -> highest seq of its events that took effect
        self._found: list[str] = []
        self._restricting: set[str] = set()
        """Events that took effect as restrictions in this replay."""
        self._last_lamport: dict[str, int] = {}  # author -> highest Lamport time of its events

    # -- queries -----------------------------------------------------------
    def level_of(self, node_id: str) -> Level | None:
        """The node's current level; ``None`` if revoked or never admitted."""
        info = self._members.get(node_id)
        return None if info is None else info.level

    def is_revoked(self, node_id: str) -> bool:
        return node_id in self._revoked

    def members(self) -> dict[str, MemberInfo]:
        """Current members only."""
        return dict(self._members)

    def revoked(self) -> frozenset[str]:
        return frozenset(self._revoked)

    def revocation(self, node_id: str) -> Revocation | None:
        """The revocation of ``node_id`` that took effect, or ``None`` if it is not revoked."""
        return self._revocations.get(node_id)

    def ever_level(self, node_id: str) -> Level | None:
        """Highest level ever granted (admission view; ignores revocation)."""
        return self._ever.get(node_id)

    def ignored_event_ids(self) -> frozenset[str]:
        """Events replayed so far that did not take effect (author lacked the right)."""
        return frozenset(self._ignored)

    def is_effective(self, event_id: str) -> bool:
        """False if the event was replayed and ignored."""
        return event_id not in self._ignored

    def clock(self) -> int:
        """The highest Lamport time of the replayed events whose authors are not revoked.

        A revoked node's events do not count, so it cannot push the clock to its
        limit.  Nothing is lost by ignoring them: every revocation that takes
        effect replays at or below this clock (its issuer is not revoked, or was
        revoked later still), so a revoked node's events above it replay after
        its revocation and never take effect, wherever a new event lands.
        """
        return max((t for a, t in self._last_lamport.items() if a not in self._revoked), default=0)

    def standing(self, event: Event) -> tuple[bool, Level | None]:
        """``(revoked, level)`` of ``event``'s author as that event is judged.

        The author's state at this point of the replay, further limited by the
        known restrictions that cover the event (see the module docstring).
        """
        revoked = event.author in self._revoked
        level = None if revoked else self.level_of(event.author)
        for restriction in self._known_by_target.get(event.author, ()):
            if restriction.covers(event):
                if restriction.level is None:
                    revoked, level = True, None
                elif level is not None:
                    level = min(level, restriction.level)
        return revoked, level

    @property
    def needs_replay(self) -> bool:
        """True once this replay met a revocation or demotion its derivation did not weigh."""
        return bool(self._found)

    def copy(self) -> Membership:
        other = Membership(self.community_id, known=self._known.values(), considered=self._considered)
        other.name = self.name
        other.founder = self.founder
        other._members = dict(self._members)
        other._revoked = set(self._revoked)
        other._revocations = dict(self._revocations)
        other._ever = dict(self._ever)
        other._ignored = set(self._ignored)
        other._applied_seq = dict(self._applied_seq)
        other._found = list(self._found)
        other._restricting = set(self._restricting)
        other._last_lamport = dict(self._last_lamport)
        return other

    def snapshot(self) -> tuple[object, ...]:
        """A comparable value of the whole state (tests, diagnostics)."""
        return (
            self.community_id,
            self.name,
            self.founder,
            tuple(sorted(self._members.items())),
            tuple(sorted(self._revoked)),
            tuple(sorted(self._ever.items())),
            tuple(sorted(self._ignored)),
        )

    # -- replay ------------------------------------------------------------
    def apply(self, event: Event, rules: EventRules[Membership]) -> bool:
        """Apply ``event`` if valid at this point; return False if it is ignored.

        Afterwards :attr:`needs_replay` tells whether the result is provisional
        (only :func:`derive_membership` resolves that; the admission view is
        exact either way).
        """
        try:
            rules.check(event, self)
            effective = True
        except BusError:
            effective = False
        try:
            rules.admit(event, self)
            admissible = True
        except BusError:
            admissible = False
        if admissible:
            self._record_grant(event)
        self._last_lamport[event.author] = max(self._last_lamport.get(event.author, 0), event.lamport)
        restriction = self._restriction_of(event) if effective else None
        if not effective and self._revokes_the_revoked(event):
            self._restricting.add(event.event_id)  # its cutoff still voids what its issuer had not seen
        if effective:
            self._take_effect(event)
            self._applied_seq[event.author] = max(self._applied_seq.get(event.author, 0), event.seq)
        else:
            self._ignored.add(event.event_id)
        self._track_restriction(event, restriction)
        return effective

    def _restriction_of(self, event: Event) -> Restriction | None:
        """The restriction ``event`` imposes if it takes effect here (call before applying it)."""
        if event.event_type == REVOKED:
            level = None
        elif event.event_type == DEMOTED:
            before = self.level_of(event.data["node_id"])
            level = Level.parse(event.data["level"])
            if before is None or level >= before:
                return None  # lowers nothing (it does not take effect either): nothing to restrict
        else:
            return None
        return Restriction(event.event_id, event.key, event.data["node_id"], event.data["cutoff_seq"], level)

    def _revokes_the_revoked(self, event: Event) -> bool:
        """A revocation, by an anchor in good standing, of a node revoked already."""
        if event.event_type != REVOKED:
            return False
        target = event.data.get("node_id")
        revoked, level = self.standing(event)
        return not revoked and level is not None and level >= Level.ANCHOR and self.is_revoked(str(target))

    def _track_restriction(self, event: Event, restriction: Restriction | None) -> None:
        if restriction is not None:
            self._restricting.add(event.event_id)
        if event.event_type in RESTRICTING and event.event_id not in self._considered:
            self._found.append(event.event_id)  # a restriction candidate the derivation did not weigh

    def _record_grant(self, event: Event) -> None:
        if event.event_type == CREATED:
            self._ever[event.author] = Level.ANCHOR
        elif event.event_type in (INVITED, PROMOTED):
            target = event.data["node_id"]
            level = Level.parse(event.data["level"])
            self._ever[target] = max(self._ever.get(target, level), level)

    def _take_effect(self, event: Event) -> None:
        data = event.data
        if event.event_type == CREATED:
            self.name = data["name"]
            self.founder = event.author
            self._members[event.author] = MemberInfo(event.author, Level.ANCHOR, event.author, event.lamport)
        elif event.event_type == INVITED:
            node_id = data["node_id"]
            level = Level.parse(data["level"])
            self._members[node_id] = MemberInfo(node_id, level, event.author, event.lamport)
        elif event.event_type in (PROMOTED, DEMOTED):
            node_id = data["node_id"]
            self._members[node_id] = replace(self._members[node_id], level=Level.parse(data["level"]))
        elif event.event_type == REVOKED:
            node_id = data["node_id"]
            self._members.pop(node_id, None)
            self._revoked.add(node_id)
            self._revocations[node_id] = Revocation(
                node_id, event.author, event.wall_clock, data["reason"], event
            )


def derive_membership(
    community_id: str,
    events_in_replay_order: Iterable[Event] | Callable[[], Iterable[Event]],
    rules: EventRules[Membership],
) -> Membership:
    """Replay the events from an empty community, again as long as restrictions require it.

    ``events_in_replay_order`` is a collection, a one-shot iterable (read into
    a list), or a function returning a fresh iterable for each pass.
    """
    if callable(events_in_replay_order):
        source = events_in_replay_order
    else:
        events = (
            events_in_replay_order
            if isinstance(events_in_replay_order, Collection)
            else list(events_in_replay_order)
        )

        def source() -> Iterable[Event]:
            return events

    candidates = _restriction_candidates(source())
    # a "demotion" to anchor lowers nothing (the rules refuse it): it cannot restrict anything
    excluded = {i for i, c in candidates.items() if c.restriction.level == Level.ANCHOR}
    while True:  # each round drops at least one candidate or ends: it terminates
        held = _holding(candidates, excluded)
        membership = Membership(
            community_id, known=[candidates[i].restriction for i in held], considered=candidates.keys()
        )
        passing = iter(source())
        try:
            for event in passing:
                membership.apply(event, rules)
        finally:
            close = getattr(passing, "close", None)
            if close is not None:
                close()
        failed = {i for i in held if i not in membership._restricting}
        if not failed:
            return membership
        excluded |= failed


@dataclass(frozen=True)
class _Candidate:
    """A revocation or demotion event as an argument: who issued it, at which seq, what it restricts."""

    issuer: str
    seq: int
    restriction: Restriction

    def attacks(self, other: _Candidate) -> bool:
        """Whether holding this restriction voids ``other`` (its issuer is the target, past the cutoff)."""
        r = self.restriction
        return (
            other is not self
            and other.issuer == r.target
            and other.seq > r.cutoff_seq
            and (r.level is None or r.level < Level.ANCHOR)  # both kinds need an anchor
        )


def _restriction_candidates(events: Iterable[Event]) -> dict[str, _Candidate]:
    out: dict[str, _Candidate] = {}
    for event in events:
        if event.event_type not in RESTRICTING:
            continue
        data = event.data
        try:
            level = None if event.event_type == REVOKED else Level.parse(data["level"])
            restriction = Restriction(
                event.event_id, event.key, data["node_id"], int(data["cutoff_seq"]), level
            )
        except (KeyError, TypeError, ValueError, BusError):
            continue  # malformed: it never takes effect anyway
        out[event.event_id] = _Candidate(event.author, event.seq, restriction)
    return out


def _holding(candidates: dict[str, _Candidate], excluded: set[str]) -> list[str]:
    """The grounded extension of the attack graph, open cycles broken in replay order."""
    live = sorted((c for i, c in candidates.items() if i not in excluded), key=lambda c: c.restriction.key)
    attackers = {c.restriction.event_id: [a for a in live if a.attacks(c)] for c in live}
    status: dict[str, bool] = {}  # event id -> holds
    while True:
        changed = True
        while changed:
            changed = False
            for c in live:
                i = c.restriction.event_id
                if i in status:
                    continue
                them = attackers[i]
                if any(status.get(a.restriction.event_id) is True for a in them):
                    status[i] = False
                    changed = True
                elif all(status.get(a.restriction.event_id) is False for a in them):
                    status[i] = True
                    changed = True
        open_ = [c for c in live if c.restriction.event_id not in status]
        if not open_:
            return [i for i, holds in status.items() if holds]
        status[open_[0].restriction.event_id] = True  # the earliest open one holds
