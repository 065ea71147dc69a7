"""``embed.text@1.0`` (the contract: :mod:`hearthnet.contracts.embed`): one registration per model
this node serves, each matched on its exact model name."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler
from hearthnet.config.embedding import EmbeddingConfig, OpenAIBackendConfig
from hearthnet.contracts.embed import (
    CAPABILITY,
    ENCODING,
    MAX_TEXTS,
    PREDICATE,
    VERSION,
    pack_vectors,
    validate_embed_input,
)
from hearthnet.errors import NotFound, Timeout
from hearthnet.services.base import ModelService, PlannedBackend
from hearthnet.services.embedding.backend import EmbeddingBackend
from hearthnet.services.embedding.model_files import ModelUnavailable, find_model_files
from hearthnet.services.embedding.onnx_backend import OnnxEmbeddingBackend, OnnxSettings
from hearthnet.services.embedding.openai_backend import OpenAIEmbeddingBackend

__all__ = ["EmbeddingService", "embed_descriptor"]

log = structlog.get_logger("hearthnet.embedding")


def embed_descriptor(
    backend: EmbeddingBackend, *, max_concurrent: int, timeout_seconds: float
) -> CapabilityDescriptor:
    return CapabilityDescriptor(
        name=CAPABILITY,
        version=VERSION,
        params={"model": backend.model, "dim": backend.dim, "max_tokens": backend.max_tokens},
        max_concurrent=max_concurrent,
        timeout_seconds=timeout_seconds,
        idempotent=True,
        description=f"{backend.model}: {backend.dim}-d text embeddings, window {backend.max_tokens} tokens",
    )


def make_handler(backend: EmbeddingBackend) -> Handler:
    async def handle(ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        wanted = ctx.params.get("model")
        if wanted is not None and wanted != backend.model:
            raise NotFound(
                f"embedding model {wanted!r:.80} is not served here (this provider: {backend.model})"
            )
        texts, normalize = validate_embed_input(ctx.input)
        bulk = bool(ctx.input.get("bulk", False))
        started = time.perf_counter()
        with anyio.move_on_after(ctx.remaining()) as scope:
            batch = await backend.embed(texts, normalize=normalize, bulk=bulk)
        if scope.cancelled_caught:
            raise Timeout(f"embedding {len(texts)} texts with {backend.model} passed the call's deadline")
        ms = round((time.perf_counter() - started) * 1000, 1)
        log.debug("embed.text", trace_id=ctx.trace_id, model=backend.model, count=len(texts), ms=ms)
        output = {
            "embeddings": pack_vectors(batch.vectors),
            "dim": backend.dim,
            "count": len(texts),
            "encoding": ENCODING,
        }
        meta = {"model": backend.model, "ms": ms, "tokens": batch.tokens, "truncated": batch.truncated}
        return output, meta

    return handle


class EmbeddingService(ModelService[EmbeddingBackend]):
    """Serves ``embed.text`` for each backend that could be started."""

    name = "embedding"
    what = "embedding backends"
    predicate = PREDICATE

    def __init__(
        self,
        config: EmbeddingConfig | None = None,
        *,
        backends: Sequence[EmbeddingBackend] = (),
    ) -> None:
        """``backends`` are used as given (tests, custom backends); ``config`` builds more at ``start``."""
        super().__init__(backends)
        self.config = config or EmbeddingConfig(in_process=False)

    def planned(self) -> list[PlannedBackend[EmbeddingBackend]]:
        cfg = self.config
        plans: list[PlannedBackend[EmbeddingBackend]] = []
        if cfg.in_process:
            onnx = OnnxSettings() if cfg.threads is None else OnnxSettings(intra_op_threads=cfg.threads)

            async def load() -> EmbeddingBackend:
                return await anyio.to_thread.run_sync(self._load_onnx, onnx)

            plans.append(PlannedBackend(onnx.model_name, load, (ModelUnavailable,)))
        for oc in cfg.openai:

            async def connect(oc: OpenAIBackendConfig = oc) -> EmbeddingBackend:
                return OpenAIEmbeddingBackend(oc, timeout_seconds=cfg.timeout_seconds)

            plans.append(PlannedBackend(oc.model, connect))
        return plans

    def _load_onnx(self, settings: OnnxSettings) -> OnnxEmbeddingBackend:
        model_dir = self.config.model_dir
        files = find_model_files(Path(model_dir) if model_dir else None)
        log.info("embedding model found; loaded on first use", model=settings.model_name, source=files.source)
        return OnnxEmbeddingBackend.lazy(files, settings)

    def descriptor(self, backend: EmbeddingBackend) -> CapabilityDescriptor:
        return embed_descriptor(
            backend, max_concurrent=self.config.max_concurrent, timeout_seconds=_timeout_for(backend)
        )

    def handler(self, backend: EmbeddingBackend) -> Handler:
        return make_handler(backend)

    def describe(self, backend: EmbeddingBackend) -> dict[str, Any]:
        return {"model": backend.model, "dim": backend.dim, "max_tokens": backend.max_tokens}


def _timeout_for(backend: EmbeddingBackend) -> float:
    if isinstance(backend, OpenAIEmbeddingBackend):
        requests = -(-MAX_TEXTS // backend.config.max_texts_per_request)
        return backend.timeout_seconds * requests + 5.0
    # 256 full-window texts take seconds alone (specs/embedding.md); leave room for sharing the CPU.
    return 60.0
