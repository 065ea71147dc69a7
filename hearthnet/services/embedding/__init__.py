"""The embedding service: ``embed.text@1.0`` over in-process ONNX or OpenAI-compatible servers.

Callers outside this package use only the names exported here.
"""

from hearthnet.config.embedding import EmbeddingConfig, OpenAIBackendConfig
from hearthnet.contracts.embed import (
    CAPABILITY,
    ENCODING,
    MAX_TEXT_CHARS,
    MAX_TEXTS,
    decode_embeddings,
    pack_vectors,
    unpack_vectors,
    validate_embed_input,
)
from hearthnet.services.embedding.backend import EmbedBatch, EmbeddingBackend
from hearthnet.services.embedding.model_files import ModelFiles, ModelUnavailable, find_model_files
from hearthnet.services.embedding.onnx_backend import DEFAULT_MODEL_NAME, OnnxEmbeddingBackend, OnnxSettings
from hearthnet.services.embedding.openai_backend import OpenAIEmbeddingBackend
from hearthnet.services.embedding.service import EmbeddingService, embed_descriptor

__all__ = [
    "CAPABILITY",
    "DEFAULT_MODEL_NAME",
    "ENCODING",
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "EmbedBatch",
    "EmbeddingBackend",
    "EmbeddingConfig",
    "EmbeddingService",
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
]
