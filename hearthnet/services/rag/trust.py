"""Whether this node may sign a RAG event: only a trusted member announces ingests, deletes and
updates (each refusal says why and what would help)."""

from __future__ import annotations

from collections.abc import Callable

from hearthnet.community.levels import Level
from hearthnet.errors import Unauthorized
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads

__all__ = ["OwnLevel", "check_own_trust"]

OwnLevel = Callable[[], Level | None]


async def check_own_trust(own_level: OwnLevel, node: str, threads: WorkerThreads, what: str) -> None:
    """``unauthorized`` unless this node is trusted now (read off the event loop: the log's lock may
    be held by a long gossip replay); ``what``: what it may not do then ("announce ingests")."""
    own = await run_blocking(own_level, limiter=threads)
    if own is None:  # never joined, or revoked: promotion is no remedy (revocation is permanent)
        raise Unauthorized(
            f"node {node} is not a member of its community (it never joined, or it was "
            f"revoked: 'hearthnet status' says which), so it may not {what}"
        )
    if own < Level.TRUSTED:
        raise Unauthorized(
            f"node {node} is only a {own.label} of its community, not trusted, so it may not "
            f"{what}; an anchor can promote it ('hearthnet member promote {node} --level trusted')"
        )
