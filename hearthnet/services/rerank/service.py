"""``rerank.text@1.0``: one registration per configured reranking model (a cross-encoder server).

Input ``{query, texts: 1..256 strings}``; output ``{scores: [float]}``, one per
text in the input's order (higher is more relevant; the model's scale, not a
cosine); meta ``{model, ms, requests}``.  The params predicate matches on the
model name.  Neither the query nor the texts are ever logged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import anyio
import structlog

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler
from hearthnet.config.rerank import RerankServerConfig
from hearthnet.contracts.rerank import CAPABILITY, MAX_TEXTS, PREDICATE, VERSION, validate_rerank_input
from hearthnet.errors import NotFound, Timeout
from hearthnet.services.base import ModelService, PlannedBackend
from hearthnet.services.rerank.backend import RerankBackend, RerankResult

__all__ = ["RerankService", "Reranker", "make_handler", "rerank_descriptor"]

log = structlog.get_logger("hearthnet.rerank")


class Reranker(Protocol):
    """What the handler needs of a model: its settings and the scores of some texts."""

    model: str
    config: RerankServerConfig

    async def score(self, query: str, texts: Sequence[str]) -> RerankResult: ...

    async def aclose(self) -> None: ...


def rerank_descriptor(backend: Reranker) -> CapabilityDescriptor:
    cfg = backend.config
    requests = -(-MAX_TEXTS // cfg.max_texts)
    waves = -(-requests // cfg.max_concurrent)
    return CapabilityDescriptor(
        name=CAPABILITY,
        version=VERSION,
        params={"model": backend.model},
        max_concurrent=cfg.max_concurrent,
        # the largest call: its requests go out max_concurrent at a time, each may take timeout_seconds
        timeout_seconds=cfg.timeout_seconds * waves + 5.0,
        idempotent=True,  # no side effects: a refused call may go to another provider
        description=f"{backend.model}: relevance of passages to a query ({cfg.protocol} server)",
    )


def make_handler(backend: Reranker) -> Handler:
    async def handle(ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        started = time.perf_counter()
        wanted = ctx.params.get("model")
        if wanted is not None and wanted != backend.model:
            raise NotFound(f"rerank model {wanted!r:.80} is not served here (this provider: {backend.model})")
        request = validate_rerank_input(ctx.input)
        with anyio.move_on_after(ctx.remaining()) as scope:
            result = await backend.score(request.query, request.texts)
        if scope.cancelled_caught:
            raise Timeout(
                f"reranking {len(request.texts)} texts with {backend.model} passed the call's deadline"
            )
        ms = round((time.perf_counter() - started) * 1000, 1)
        log.info(
            "rerank.text",
            trace_id=ctx.trace_id,
            model=backend.model,
            texts=len(request.texts),
            requests=result.requests,
            ms=ms,
        )
        return {"scores": result.scores}, {"model": backend.model, "ms": ms, "requests": result.requests}

    return handle


class RerankService(ModelService[Reranker]):
    """Serves ``rerank.text`` for each configured server whose settings could be used."""

    name = "rerank"
    what = "rerank servers"
    predicate = PREDICATE

    def __init__(
        self, servers: Sequence[RerankServerConfig] = (), *, backends: Sequence[Reranker] = ()
    ) -> None:
        """``backends`` are used as given (tests, custom backends); ``servers`` build more at ``start``."""
        super().__init__(backends)
        self._servers = tuple(servers)

    def planned(self) -> list[PlannedBackend[Reranker]]:
        plans: list[PlannedBackend[Reranker]] = []
        for server in self._servers:  # BadRequest: the API key variable is not set

            async def connect(server: RerankServerConfig = server) -> Reranker:
                return RerankBackend(server)

            plans.append(PlannedBackend(server.model, connect))
        return plans

    def descriptor(self, backend: Reranker) -> CapabilityDescriptor:
        return rerank_descriptor(backend)

    def handler(self, backend: Reranker) -> Handler:
        return make_handler(backend)

    def describe(self, backend: Reranker) -> dict[str, Any]:
        config = backend.config
        return {"model": backend.model, "protocol": config.protocol, "max_texts": config.max_texts}
