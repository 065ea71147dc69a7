"""Which services a node runs, decided from its config (part of the composition root).

Each factory builds one service from the node's parts, or returns ``None``
when the config turns it off.  Services never import each other; this module
is part of the composition root.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def rag_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.rag
    if not cfg.enabled:
        return None
    from hearthnet.services.rag.events import INGESTED
    from hearthnet.services.rag.service import RagService, RagSettings
    from hearthnet.services.rag.store import CorpusStore

    store = CorpusStore(parts.config.rag_dir, server_url=cfg.chroma_url)
    community, event_log, own_id = parts.community, parts.event_log, parts.identity.node_id

    async def append_event(event_type: str, data: dict[str, Any]) -> str:
        return (await community.append(event_type, data)).event_id

    def find_event(corpus: str, doc_cid: str) -> str | None:
        for event in event_log.events_of_type(INGESTED, effective_only=True, author=own_id):
            if event.data.get("corpus") == corpus and event.data.get("doc_cid") == doc_cid:
                return event.event_id
        return None

    return RagService(
        bus=parts.bus,
        store=store,
        blobs=parts.extras["blob_store"],
        settings=RagSettings(
            embedding_model=cfg.embedding_model,
            query_timeout_seconds=cfg.query_timeout_seconds,
            embed_timeout_seconds=cfg.embed_timeout_seconds,
            accept_new_corpora=cfg.accept_new_corpora,
        ),
        append_event=append_event,
        find_event=find_event,
        own_level=lambda: event_log.level_of(own_id),
    )


def ocr_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.ocr
    if not cfg.enabled:
        return None
    from hearthnet.services.ocr.service import OcrService, OcrSettings

    return OcrService(
        bus=parts.bus,
        blobs=parts.extras["blob_store"],
        settings=OcrSettings(max_concurrent=cfg.max_concurrent, dpi=cfg.dpi),
    )


def service_factories() -> list[ServiceFactory]:
    # Order matters: rag and ocr use the blob store the file service opened.
    return [file_service, embedding_service, rag_service, ocr_service]
