"""Which services a node runs, decided from its config (used by ``Node``).

Each factory builds one service from the node's parts, or returns ``None``
when the config turns it off.  Services never import each other; this module
is part of the composition root.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hearthnet.node import NodeParts
    from hearthnet.services.base import Service

ServiceFactory = Callable[["NodeParts"], "Service | None"]


def file_service(parts: NodeParts) -> Service | None:
    from hearthnet.blobs import BlobStore
    from hearthnet.services.file.service import FileService

    store = BlobStore(parts.config.blobs_dir, cap_bytes=parts.config.blobs.cap_bytes)
    parts.extras["blob_store"] = store
    return FileService(bus=parts.bus, store=store)


def embedding_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.embedding
    if not cfg.enabled:
        return None
    from hearthnet.services.embedding.onnx_backend import OnnxSettings
    from hearthnet.services.embedding.openai_backend import OpenAIBackendConfig
    from hearthnet.services.embedding.service import EmbeddingConfig, EmbeddingService

    onnx = OnnxSettings() if cfg.threads is None else OnnxSettings(intra_op_threads=cfg.threads)
    openai = tuple(
        OpenAIBackendConfig(
            base_url=o.base_url,
            model=o.model,
            dim=o.dim,
            max_tokens=o.max_tokens,
            api_key_env=o.api_key_env,
            timeout_seconds=o.timeout_seconds,
        )
        for o in cfg.openai
    )
    return EmbeddingService(
        EmbeddingConfig(onnx=onnx, model_dir=Path(cfg.model_dir) if cfg.model_dir else None, openai=openai)
    )


def service_factories() -> list[ServiceFactory]:
    return [file_service, embedding_service]
