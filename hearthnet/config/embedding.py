"""``[embedding]`` and its ``[[embedding.openai]]`` tables: whether this node serves ``embed.text``,
with the in-process model and with models on OpenAI-compatible servers.  ``HEARTHNET_EMBEDDING``,
``HEARTHNET_MODEL_DIR`` and the seeds' ``RAG_EMBED_TIMEOUT_SECONDS`` override them (the last is
read here only: a server model without its own ``timeout_seconds`` takes ``[embedding]
timeout_seconds``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hearthnet.config.archives import ArchiveDefaults, check_server_url
from hearthnet.config.values import api_key, array_of_tables, get, integer, seconds, switched
from hearthnet.errors import BadRequest

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "KEYS",
    "OPENAI_KEYS",
    "EmbeddingConfig",
    "OpenAIBackendConfig",
    "embedding_env",
    "embedding_from",
]

KEYS = frozenset({"enabled", "model_dir", "threads", "openai", "timeout_seconds"})
OPENAI_KEYS = frozenset({"base_url", "model", "dim", "api_key_env", "max_tokens", "timeout_seconds"})
DEFAULT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class OpenAIBackendConfig:
    """One remote model: an OpenAI-compatible ``/v1/embeddings`` server (TEI, Ollama, vLLM, OpenAI)."""

    base_url: str
    model: str
    dim: int
    max_tokens: int = 512
    """What the descriptor advertises to chunkers; the server's real window (TEI reports it in /info)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (sent as ``Authorization: Bearer``)."""
    timeout_seconds: float | None = None
    """``None``: ``[embedding] timeout_seconds``."""
    max_texts_per_request: int = 256

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise BadRequest(f"embedding base_url must be http(s)://..., got {self.base_url!r}")
        if not self.model:
            raise BadRequest("embedding model name must not be empty")
        if self.dim < 1 or self.max_tokens < 1 or self.max_texts_per_request < 1:
            raise BadRequest("dim, max_tokens and max_texts_per_request must be positive")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise BadRequest("timeout_seconds must be positive")

    def api_key(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """The key named by ``api_key_env`` (``bad_request`` if that variable is not set)."""
        return api_key(self.api_key_env, environ, f"embedding model {self.model!r:.80}")


@dataclass(frozen=True)
class EmbeddingConfig:
    """What this node embeds with."""

    enabled: bool = True
    in_process: bool = True
    """Serve the in-process model (all-MiniLM-L6-v2, ONNX) when its files are found."""
    model_dir: str | None = None
    """Where the in-process model's files are (default: Python packages, then ChromaDB's cache)."""
    threads: int | None = None
    """Threads inside one inference of the in-process model (default: its own)."""
    openai: tuple[OpenAIBackendConfig, ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """A server model's timeout unless it gives its own."""
    max_concurrent: int = 16
    """Calls of one model served at once."""


def embedding_from(emb: Mapping[str, Any], defaults: ArchiveDefaults) -> EmbeddingConfig:
    """``[embedding]`` of config.toml (its keys checked by the caller); a server table without a
    ``base_url`` takes the seeds' TEI fallback of ``defaults``."""
    openai = []
    where = "embedding.openai"
    for _, b in array_of_tables(emb, "openai", "embedding", OPENAI_KEYS, ("model", "dim")):
        base_url = get(b, "base_url", str, None, where)
        timeout = get(b, "timeout_seconds", (int, float), None, where)
        openai.append(
            OpenAIBackendConfig(
                # the seeds' TEI fallback: DOCPROC_TEI_EMBEDDINGS_URL, else http://tei-embeddings:8080
                base_url=defaults.tei_url
                if base_url is None
                else check_server_url(base_url, "[[embedding.openai]] base_url in config.toml"),
                model=get(b, "model", str, None, where),
                dim=integer(b, "dim", 0, 1, where),  # present: checked above
                api_key_env=get(b, "api_key_env", str, None, where),
                max_tokens=integer(b, "max_tokens", 512, 1, where),
                timeout_seconds=None if timeout is None else seconds(b, "timeout_seconds", 10.0, where),
            )
        )
    return EmbeddingConfig(
        enabled=get(emb, "enabled", bool, True, "embedding"),
        model_dir=get(emb, "model_dir", str, None, "embedding"),
        threads=integer(emb, "threads", None, 1, "embedding"),
        openai=tuple(openai),
        timeout_seconds=seconds(emb, "timeout_seconds", 10.0, "embedding", name="embedding.timeout_seconds"),
    )


def embedding_env(
    embedding: EmbeddingConfig, env: Mapping[str, str], embed_timeout: float | None
) -> EmbeddingConfig:
    """The overrides of ``[embedding]``; ``embed_timeout`` is ``RAG_EMBED_TIMEOUT_SECONDS`` if set."""
    embedding = switched(embedding, env, "HEARTHNET_EMBEDDING")
    if "HEARTHNET_MODEL_DIR" in env:
        embedding = replace(embedding, model_dir=env["HEARTHNET_MODEL_DIR"])
    if embed_timeout is not None:
        embedding = replace(embedding, timeout_seconds=embed_timeout)
    return embedding
