"""Community membership and trust levels, derived from the signed event log."""

from hearthnet.community.invite import InviteToken, decode_token, encode_token
from hearthnet.community.levels import Level
from hearthnet.community.membership import MemberInfo, Membership, community_id_for, derive_membership

__all__ = [
    "InviteToken",
    "Level",
    "MemberInfo",
    "Membership",
    "community_id_for",
    "decode_token",
    "derive_membership",
    "encode_token",
]
