"""The replicas' capabilities: ``rag.export`` (to peers), ``rag.replicate`` and ``rag.move`` (this
node's owner), and the single-writer rule the RAG service asks before a write (:meth:`Replicas.refuse_write`).

``rag.replicate`` refuses ``personal`` and ``system`` (with the reason), a node that is only a member
(a replica serves a corpus's documents to the mesh, which is a trusted node's job), and the corpus's
own host.  ``rag.move`` is an anchor's: the new host must be a replica that has applied every
document the log names (this node's own state, or the lag it advertises).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.levels import Level
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import (
    BEHIND,
    EXPORT,
    MOVE,
    MOVED,
    REPLICA_OF,
    REPLICATE,
    check_replicable,
    host_label,
    validate_corpus_name,
)
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound, Unauthorized
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.offers import corpus_offer
from hearthnet.services.rag.replicas.export import ExportServer
from hearthnet.services.rag.replicas.follower import Follower
from hearthnet.services.rag.replicas.log import ReadView

__all__ = ["Replicas", "export_registration", "replica_meta"]

OwnLevel = Callable[[], Level | None]
Append = Callable[[str, dict[str, Any]], Awaitable[str]]
FIRST_SYNC_SECONDS = 600.0
"""How long ``rag.replicate`` waits for the first copy before answering with the lag so far."""


def replica_meta(node: str, corpus: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A replica's ``rag.query`` meta (``replica_of``, ``behind``) and, when it is behind, the warning
    that says so ("from a copy 2 documents behind"); nothing for a host."""
    meta = {k: params[k] for k in (REPLICA_OF, BEHIND) if k in params}
    behind = meta.get(BEHIND)
    if not behind:
        return meta, []
    return meta, [
        f"from a copy {behind} document{'s' if behind != 1 else ''} behind: node {node} holds a replica "
        f"of corpus {corpus}, whose host {meta.get(REPLICA_OF)} is not online with a fresher one"
    ]


def export_registration(export: ExportServer, corpus: str) -> Registration:
    """``rag.export`` of one corpus this node holds (its host or a replica)."""
    return corpus_offer(
        EXPORT,
        export.handle,
        params={"corpus": corpus},
        concurrent=4,
        timeout=600.0,
        description=f"copy a document of corpus {corpus} (chunks, metadata, vectors)",
        streaming=True,
    )


@dataclass(kw_only=True, eq=False)
class Replicas:
    """This node's replicas: its follower, its export server, and their capabilities."""

    bus: BusAPI
    follower: Follower
    export: ExportServer
    view: ReadView
    own_level: OwnLevel
    append_event: Append
    threads: WorkerThreads

    def registrations(self) -> list[Registration]:
        return [
            Registration(
                CapabilityDescriptor(REPLICATE, (1, 0), timeout_seconds=FIRST_SYNC_SECONDS, local_only=True),
                self._handle_replicate,
            ),
            Registration(
                CapabilityDescriptor(MOVE, (1, 0), timeout_seconds=60.0, local_only=True),
                self._handle_move,
            ),
        ]

    def health(self) -> list[dict[str, Any]]:
        return [s.json() for s in sorted(self.follower.states.values(), key=lambda s: s.corpus)]

    # the single writer ------------------------------------------------------------------------
    def refuse_write(self, corpus: str, what: str) -> None:
        """``bad_request`` naming the host when this node holds only a replica of ``corpus``."""
        host = self.follower.host_of(corpus)
        if host is None:
            return
        raise BadRequest(
            f"corpus {corpus} is hosted on node {host_label(host)}: this node holds a replica, which "
            f"takes no {what}; send them to the host ('--on {host}')"
        )

    # rag.replicate ----------------------------------------------------------------------------
    async def _own_level_checked(self, what: str, need: Level) -> None:
        own = await run_blocking(self.own_level, limiter=self.threads)
        node = self.bus.node_id
        if own is None or own < need:
            label = "not a member" if own is None else f"only a {own.label}"
            raise Unauthorized(
                f"node {node} is {label} of its community, so it cannot {what}: that needs a "
                f"{need.label} node ('hearthnet member promote {node} --level {need.label}')"
            )

    async def _handle_replicate(self, ctx: CallContext) -> dict[str, Any]:
        check_input_keys(ctx.input, {"corpus", "replicate"}, REPLICATE)
        if "corpus" not in ctx.input:
            return {"replicas": self.health()}
        corpus = check_replicable(ctx.input["corpus"])
        keep = ctx.input.get("replicate", True)
        if not isinstance(keep, bool):
            raise BadRequest(f"{REPLICATE} input.replicate must be true or false")
        if not keep:
            was = self.follower.policy.wants(corpus) or corpus in self.follower.states
            self.follower.policy.drop(corpus)
            await self.follower.give_up(corpus)
            return {"corpus": corpus, "replicating": False, "was": was}
        await self._own_level_checked("hold a replica", Level.TRUSTED)
        view = await run_blocking(self.view, corpus, limiter=self.threads)
        if view.host == self.bus.node_id:
            raise BadRequest(f"this node hosts corpus {corpus}: it cannot also be its replica")
        if view.host is None:
            raise NotFound(f"no corpus {corpus!r} in the community's log: nothing to replicate yet")
        self.follower.policy.add(corpus)
        with anyio.move_on_after(max(0.0, ctx.remaining() - 1.0)):
            await self.follower.sync(corpus)
        state = self.follower.states.get(corpus)
        if state is not None and state.error and state.error.startswith(CapacityExceeded.code):
            self.follower.policy.drop(corpus)
            await self.follower.give_up(corpus)
            raise CapacityExceeded(state.error.partition(": ")[2])
        self.follower.wake()
        return {"corpus": corpus, "replicating": True, **(state.json() if state else {})}

    # rag.move ---------------------------------------------------------------------------------
    async def _handle_move(self, ctx: CallContext) -> dict[str, Any]:
        check_input_keys(ctx.input, {"corpus", "to"}, MOVE)
        corpus = check_replicable(validate_corpus_name(ctx.input.get("corpus")))
        to = ctx.input.get("to")
        if not isinstance(to, str) or not to:
            raise BadRequest(f"{MOVE} input.to must be a node id")
        await self._own_level_checked("move a corpus", Level.ANCHOR)
        view = await run_blocking(self.view, corpus, limiter=self.threads)
        if view.host is None:
            raise NotFound(f"no corpus {corpus!r} in the community's log")
        if view.host == to:
            raise BadRequest(f"node {to} already hosts corpus {corpus}")
        self._check_current(corpus, to, view.host)
        event_id = await self.append_event(MOVED, {"corpus": corpus, "from": view.host, "to": to})
        self.follower.wake()
        return {"corpus": corpus, "from": view.host, "to": to, "event_id": event_id}

    def _check_current(self, corpus: str, to: str, host: str) -> None:
        """``bad_request`` unless ``to`` is a replica of ``corpus`` with nothing left to apply."""
        if to == self.bus.node_id:
            state = self.follower.states.get(corpus)
            behind = None if state is None or state.error else state.behind
            replica_of = None if state is None else state.host
        else:
            offers = [p for p in self.bus.offers("rag.query") if p.node_id == to]
            params = next(
                (p.descriptor.params for p in offers if p.descriptor.params.get("corpus") == corpus), None
            )
            if params is None:
                raise BadRequest(
                    f"node {to} is not online with a replica of corpus {corpus}: the new host must be an "
                    "up-to-date replica ('hearthnet corpus replicate' there first)"
                )
            behind = params.get(BEHIND)
            replica_of = params.get(REPLICA_OF)
        if replica_of != host or behind != 0:
            state_text = "not a replica" if replica_of != host else f"{behind} documents behind"
            raise BadRequest(
                f"node {to} cannot host corpus {corpus}: it is {state_text}; the new host must be a "
                "replica that has applied every document"
            )
