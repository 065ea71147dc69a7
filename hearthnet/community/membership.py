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
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
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
    "community_id_for",
    "derive_membership",
]

COMMUNITY_ID_PREFIX = "hc1:"

CREATED = "community.created"
INVITED = "member.invited"
PROMOTED = "member.promoted"
REVOKED = "member.revoked"


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


class Membership:
    """The state of one community at some point of the replay."""

    def __init__(self, community_id: str) -> None:
        self.community_id = community_id
        self.name: str | None = None
        self.founder: str | None = None
        self._members: dict[str, MemberInfo] = {}
        self._revoked: set[str] = set()
        self._ever: dict[str, Level] = {}
        self._ignored: set[str] = set()

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

    def ever_level(self, node_id: str) -> Level | None:
        """Highest level ever granted (admission view; ignores revocation)."""
        return self._ever.get(node_id)

    def ignored_event_ids(self) -> frozenset[str]:
        """Events replayed so far that did not take effect (author lacked the right)."""
        return frozenset(self._ignored)

    def is_effective(self, event_id: str) -> bool:
        """False if the event was replayed and ignored."""
        return event_id not in self._ignored

    def copy(self) -> Membership:
        other = Membership(self.community_id)
        other.name = self.name
        other.founder = self.founder
        other._members = dict(self._members)
        other._revoked = set(self._revoked)
        other._ever = dict(self._ever)
        other._ignored = set(self._ignored)
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
    def apply(self, event: Event, rules: EventRules) -> bool:
        """Apply ``event`` if valid at this point; return False if it is ignored."""
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
        if not effective:
            self._ignored.add(event.event_id)
            return False
        self._take_effect(event)
        return True

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
        elif event.event_type == PROMOTED:
            node_id = data["node_id"]
            self._members[node_id] = replace(self._members[node_id], level=Level.parse(data["level"]))
        elif event.event_type == REVOKED:
            node_id = data["node_id"]
            self._members.pop(node_id, None)
            self._revoked.add(node_id)


def derive_membership(
    community_id: str, events_in_replay_order: Iterable[Event], rules: EventRules
) -> Membership:
    """Replay ``events_in_replay_order`` from an empty community."""
    membership = Membership(community_id)
    for event in events_in_replay_order:
        membership.apply(event, rules)
    return membership
