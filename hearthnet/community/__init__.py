"""Community membership and trust levels, derived from the signed event log.

The names below load their module on first use: ``Level`` alone (which the
bus's descriptors need, and with them every client) does not pull in the
event log and invitations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.runtime.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from hearthnet.community.invite import InviteToken, decode_token, encode_token
    from hearthnet.community.levels import Level
    from hearthnet.community.membership import MemberInfo, Membership, community_id_for, derive_membership
    from hearthnet.community.rules import MEMBERSHIP, MembershipModel, default_rules

_HOME = {
    "InviteToken": "invite",
    "decode_token": "invite",
    "encode_token": "invite",
    "Level": "levels",
    "MemberInfo": "membership",
    "Membership": "membership",
    "community_id_for": "membership",
    "derive_membership": "membership",
    "MEMBERSHIP": "rules",
    "MembershipModel": "rules",
    "default_rules": "rules",
}

__all__ = [
    "MEMBERSHIP",
    "InviteToken",
    "Level",
    "MemberInfo",
    "Membership",
    "MembershipModel",
    "community_id_for",
    "decode_token",
    "default_rules",
    "derive_membership",
    "encode_token",
]


if not TYPE_CHECKING:  # the type checker sees the imports above, and flags a misspelt name
    __getattr__ = lazy_getattr(__name__, _HOME, globals())
