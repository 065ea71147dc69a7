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
    from hearthnet.services.rag.catalog import effective_ingest
    from hearthnet.services.rag.service import RagService, RagSettings
    from hearthnet.services.rag.store import CorpusStore

    store = CorpusStore(parts.config.rag_dir, server_url=cfg.chroma_url)
    community, event_log, own_id = parts.community, parts.event_log, parts.identity.node_id

    async def append_event(event_type: str, data: dict[str, Any]) -> str:
        return (await community.append(event_type, data)).event_id

    def find_event(corpus: str, doc_cid: str) -> str | None:
        # in effect: not cancelled by a later delete (a document deleted, then ingested again,
        # must be announced again)
        return effective_ingest(event_log, corpus, doc_cid, own_id)

    def corpus_changed(corpus: str) -> None:
        for listener in parts.corpus_listeners:  # e.g. the answer cache (factories later in the list)
            listener(corpus)

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
        corpus_changed=corpus_changed,
    )


def rag_catalog_service(parts: NodeParts) -> Service | None:
    """``rag.known_corpora`` on every node, RAG or not: the corpora of offline hosts are listed anywhere."""
    from hearthnet.services.rag.catalog import RagCatalog

    return RagCatalog(bus=parts.bus, event_log=parts.event_log)


def archive_tool_service(parts: NodeParts) -> Service | None:
    """``rag.search_archives`` for this node's front doors (MCP, the gateway, the composer)."""
    from hearthnet.services.rag.archives.service import ArchiveToolService

    cfg = parts.config.rag
    return ArchiveToolService(
        bus=parts.bus,
        archives=cfg.archives,
        allowed_urls=sorted(cfg.allowed_archive_urls),
        defaults=cfg.archive_defaults,
        query_timeout=cfg.query_timeout_seconds,
        embed_timeout=cfg.embed_timeout_seconds,
    )


def llm_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.llm
    if not cfg.enabled or (not cfg.openai and cfg.local is None):
        return None
    from hearthnet.services.llm.local import LocalLlmConfig
    from hearthnet.services.llm.openai_backend import OpenAIChatConfig
    from hearthnet.services.llm.service import LlmConfig, LlmService

    openai = tuple(
        OpenAIChatConfig(
            base_url=o.base_url,
            model=o.model,
            context_tokens=o.context_tokens,
            max_output_tokens=o.max_output_tokens,
            api_key_env=o.api_key_env,
            timeout_seconds=o.timeout_seconds,
            call_timeout_seconds=o.call_timeout_seconds,
            max_concurrent=o.max_concurrent,
            prompt_format=o.prompt_format,
            stream_usage=o.stream_usage,
        )
        for o in cfg.openai
    )
    local = None
    if cfg.local is not None:
        lc = cfg.local
        local = LocalLlmConfig(
            model_path=Path(lc.model_path).expanduser(),
            model=lc.model,
            context_tokens=lc.context_tokens,
            max_output_tokens=lc.max_output_tokens,
            threads=lc.threads,
            port=lc.port,
            timeout_seconds=lc.timeout_seconds,
            call_timeout_seconds=lc.call_timeout_seconds,
            start_timeout_seconds=lc.start_timeout_seconds,
            prompt_format=lc.prompt_format,
            log_path=parts.config.home / "logs" / "llm-local.log",
        )
    return LlmService(LlmConfig(openai=openai, local=local))


def rerank_service(parts: NodeParts) -> Service | None:
    """``rerank.text`` for each ``[[rerank.servers]]`` table: only when one is configured."""
    cfg = parts.config.rerank
    if not cfg.enabled or not cfg.servers:
        return None
    from hearthnet.services.rerank.service import RerankService

    return RerankService(cfg.servers)


def answer_service(parts: NodeParts) -> Service | None:
    cfg = parts.config.answer
    if not cfg.enabled:
        return None
    from hearthnet.answer.service import AnswerService

    service = AnswerService(bus=parts.bus, config=cfg, sessions_path=parts.config.answer_path)
    parts.community.on_events(service.events_stored)
    parts.corpus_listeners.append(service.corpus_changed)
    return service


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
    return [
        file_service,
        embedding_service,
        rag_catalog_service,
        rag_service,
        archive_tool_service,
        ocr_service,
        llm_service,
        rerank_service,
        answer_service,
    ]
