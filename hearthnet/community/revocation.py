"""A node learning its own revocation from a peer that refuses it (pure, no I/O).

A revoked node is cut off at once, usually before gossip brings it the revocation; the
peer that refuses its next handshake shows it the signed ``member.revoked`` event.  The
node cannot always store that event in its log (it may lack the author's events before
it), so it checks the event against what it knows and keeps it as a notice of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.community.levels import Level
from hearthnet.community.membership import REVOKED, Membership, Revocation
from hearthnet.errors import BadRequest, Unauthorized

if TYPE_CHECKING:
    from hearthnet.events.envelope import Event

__all__ = ["own_revocation"]


def own_revocation(event: Event, node_id: str, membership: Membership) -> Revocation:
    """``event`` as the revocation of ``node_id``, if it can be one; else ``BadRequest``/``Unauthorized``.

    ``event`` has a valid signature already (``Event.from_wire``).  It must be a
    ``member.revoked`` of this community naming ``node_id`` (not the founder), signed by a
    node that this log knows was made an anchor: a member without that right cannot make
    another believe it was revoked.
    """
    if event.community_id != membership.community_id:
        raise BadRequest("the revocation shown belongs to another community")
    if event.event_type != REVOKED:
        raise BadRequest(f"a revocation was expected, not {event.event_type!r:.40}")
    target, reason = event.data.get("node_id"), event.data.get("reason")
    if target != node_id or not isinstance(reason, str):
        raise BadRequest("the revocation shown names another node")
    if node_id == membership.founder:
        raise Unauthorized("the founder cannot be revoked")
    if membership.ever_level(event.author) != Level.ANCHOR:
        raise Unauthorized(f"{event.author} is not known here as an anchor: it cannot revoke")
    return Revocation(node_id, event.author, event.wall_clock, reason, event)
