"""The trust level each capability needs, written once: the services put it in their descriptors
(``trust_required``, what the bus checks of a peer's call) and the HTTP doors' allow-list reads it
(what a login or API key must hold).  A capability not named here needs ``member``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from hearthnet.community.levels import Level
from hearthnet.contracts import file, folders, node, rag

__all__ = ["TRUST_REQUIRED", "trust_required"]

TRUST_REQUIRED: Final[Mapping[str, Level]] = {
    # changing the corpora and the blob stores
    file.PUT: Level.TRUSTED,
    file.IMPORT: Level.TRUSTED,
    file.PUSH: Level.TRUSTED,
    rag.INGEST: Level.TRUSTED,
    rag.DELETE: Level.TRUSTED,
    rag.UPDATE: Level.TRUSTED,
    rag.EXPORT: Level.TRUSTED,
    folders.WATCH: Level.ANCHOR,  # folders on the node's own disk: its owner's
    # changing the community
    node.INVITE: Level.ANCHOR,
    node.MEMBER_PROMOTE: Level.ANCHOR,
    node.MEMBER_DEMOTE: Level.ANCHOR,
    node.MEMBER_REVOKE: Level.ANCHOR,
}


def trust_required(capability: str) -> Level:
    """The lowest level that may call ``capability``."""
    return TRUST_REQUIRED.get(capability, Level.MEMBER)
