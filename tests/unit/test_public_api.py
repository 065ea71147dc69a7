"""The public names of each package are a contract: changing them must be deliberate (httpx does the same).

A package's face is its ``__init__``'s ``__all__``; every package that has one is listed here, so a new
face or a changed one shows in review.  Packages without ``__all__`` are namespaces of modules that are
imported by path (``hearthnet.bus.calls``), not through the package.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import hearthnet

EXPECTED: dict[str, set[str]] = {
    "hearthnet": {
        "__version__",
    },
    "hearthnet.answer": {
        "AnswerService",
    },
    "hearthnet.blobs": {
        "BlobInfo",
        "BlobStore",
        "CHUNK_SIZE",
        "CidHasher",
        "CorruptBlob",
        "MAX_CHUNK_SIZE",
        "Manifest",
        "ManifestBuilder",
        "ReassemblyCheck",
        "blob_cid",
        "chunk_cid",
        "is_cid",
        "manifest_for_bytes",
        "parse_cid",
    },
    "hearthnet.client": {
        "AsyncClient",
        "BusError",
        "CallResult",
        "Client",
        "CorpusAnswer",
        "CorpusHit",
        "MultiSearch",
        "resolve_home",
        "search_corpora",
    },
    "hearthnet.community": {
        "InviteToken",
        "Level",
        "MEMBERSHIP",
        "MemberInfo",
        "Membership",
        "MembershipModel",
        "community_id_for",
        "decode_token",
        "default_rules",
        "derive_membership",
        "encode_token",
    },
    "hearthnet.config": {
        "AnswerConfig",
        "BlobConfig",
        "CONFIG_FILE",
        "EmbeddingConfig",
        "LlmConfig",
        "LlmLocalConfig",
        "LlmOpenAIConfig",
        "LogConfig",
        "NetworkConfig",
        "NodeConfig",
        "OcrConfig",
        "OpenAIBackendConfig",
        "RagConfig",
        "RerankConfig",
        "RerankServerConfig",
        "UI_DEFAULT_PORT",
        "UI_MAX_UPLOAD_BYTES",
        "UiConfig",
        "apply_env",
        "check_name",
        "config_from_mapping",
        "default_config_text",
        "load_config",
        "log_path",
        "parse_listen",
        "shown_name",
        "toml_string",
    },
    "hearthnet.events": {
        "Event",
        "EventLog",
        "EventRule",
        "EventRules",
        "IngestReport",
        "LogState",
        "PullResult",
        "Rank",
        "SCHEMA_VERSION",
        "StateModel",
        "is_ulid",
        "lacking",
        "new_ulid",
        "parse_version_vector",
        "pull",
        "replay_key",
        "require_fields",
        "sign_event",
    },
    "hearthnet.frontends.cli": {
        "build_parser",
        "main",
    },
    "hearthnet.identity": {
        "Identity",
        "NODE_ID_PREFIX",
        "create_identity",
        "load_identity",
        "node_id_from_public_key",
        "public_key_from_node_id",
        "verify_signature",
    },
    "hearthnet.services.embedding": {
        "CAPABILITY",
        "DEFAULT_MODEL_NAME",
        "ENCODING",
        "EmbedBatch",
        "EmbeddingBackend",
        "EmbeddingConfig",
        "EmbeddingService",
        "MAX_TEXTS",
        "MAX_TEXT_CHARS",
        "ModelFiles",
        "ModelUnavailable",
        "OnnxEmbeddingBackend",
        "OnnxSettings",
        "OpenAIBackendConfig",
        "OpenAIEmbeddingBackend",
        "decode_embeddings",
        "embed_descriptor",
        "find_model_files",
        "pack_vectors",
        "unpack_vectors",
        "validate_embed_input",
    },
    "hearthnet.services.llm": {
        "CAPABILITY",
        "ChatBackend",
        "ChatCompletion",
        "ChatRequest",
        "LlmConfig",
        "LlmService",
        "LocalChatBackend",
        "LocalLlmConfig",
        "LocalUnavailable",
        "MAX_MESSAGES",
        "MAX_TOTAL_CHARS",
        "OpenAIChatBackend",
        "OpenAIChatConfig",
        "ROLES",
        "Usage",
        "chat_descriptor",
        "estimate_prompt_tokens",
        "estimate_tokens",
        "validate_chat_input",
    },
    "hearthnet.services.node": {
        "NodeService",
    },
    "hearthnet.services.ocr": {
        "CAPABILITY",
        "Line",
        "MAX_IMAGE_BYTES",
        "OcrEngine",
        "OcrService",
        "OcrSettings",
        "OcrUnavailable",
        "Recognition",
        "parse_ocr_input",
    },
    "hearthnet.services.rag.archives": {
        "Archive",
        "ArchiveHit",
        "ArchiveRef",
        "ArchiveSearch",
        "ChromaHttpClient",
        "CollectionRef",
        "Ranked",
        "SearchOutcome",
        "TOOL_NAME",
        "archive_clause",
        "effective_archives",
        "embed_query",
        "format_json",
        "format_text",
        "map_metadata",
        "merge_hits",
        "tool_schema",
    },
    "hearthnet.services.rag.store": {
        "CHUNK_KEYS",
        "CorpusRecord",
        "CorpusStore",
        "DocumentSource",
        "HNSW_PARAMS",
        "LocalCorpus",
        "SCHEMA_VERSION",
        "collection_name",
        "corpus_from_collection",
        "staging_collection_name",
    },
    "hearthnet.services.rerank": {
        "CAPABILITY",
        "MAX_QUERY_CHARS",
        "MAX_TEXTS",
        "MAX_TEXT_CHARS",
        "PROTOCOLS",
        "RERANK_ENV",
        "RerankBackend",
        "RerankConfig",
        "RerankRequest",
        "RerankResult",
        "RerankServerConfig",
        "RerankService",
        "Reranker",
        "rerank_config",
        "rerank_descriptor",
        "rerank_from_env",
        "validate_rerank_input",
    },
    "hearthnet.transport": {
        "Admit",
        "Link",
        "LinkHandler",
        "MemoryByteStream",
        "PROTOCOL_VERSION",
        "Session",
        "accept_link",
        "create_listener",
        "format_address",
        "initiate_link",
        "listener_port",
        "memory_stream_pair",
        "open_link",
        "serve_links",
        "socket_peer_address",
    },
    "hearthnet.wire": {
        "DEFAULT_MAX_FRAME",
        "FrameDecoder",
        "MsgLimits",
        "encode_frame",
        "pack",
        "unpack_map",
    },
}

MODULE_FACES = {"hearthnet.client"}
"""Faces that are modules rather than packages."""


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is exported but missing"


def test_every_package_face_is_listed() -> None:
    faces = {"hearthnet"} | MODULE_FACES
    for info in pkgutil.walk_packages(hearthnet.__path__, "hearthnet."):
        if info.ispkg and hasattr(importlib.import_module(info.name), "__all__"):
            faces.add(info.name)
    assert faces == set(EXPECTED)


def test_every_error_code_has_one_exported_class() -> None:
    errors = importlib.import_module("hearthnet.errors")
    classes = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    codes = {c.code for c in classes if c.__name__ not in ("BusError", "ProtocolError")}
    assert codes == set(errors.ERROR_CODES)
