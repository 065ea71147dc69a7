"""Community membership and trust levels, derived from the signed event log.

The names below load their module on first use: ``Level`` alone (which the
bus's descriptors need, and with them every client) does not pull in the
event log and invitations.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hearthnet.community.invite import InviteToken, decode_token, encode_token
    from hearthnet.community.levels import Level
    from hearthnet.community.membership import MemberInfo, Membership, community_id_for, derive_membership

_HOME = {
    "InviteToken": "invite",
    "decode_token": "invite",
    "encode_token": "invite",
    "Level": "levels",
    "MemberInfo": "membership",
    "Membership": "membership",
    "community_id_for": "membership",
    "derive_membership": "membership",
}

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


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
