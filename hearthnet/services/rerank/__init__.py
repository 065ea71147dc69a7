"""The rerank service: ``rerank.text@1.0`` over a cross-encoder server (TEI or a Cohere-style ``/v1/rerank``).

Callers outside this package use only the names exported here.  The backend and the service load
on first use (no HTTP client until then); the settings are ``hearthnet.config.rerank`` and the
contract ``hearthnet.contracts.rerank``, re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.config.rerank import (
    PROTOCOLS,
    RERANK_ENV,
    RerankConfig,
    RerankServerConfig,
    rerank_config,
    rerank_from_env,
)
from hearthnet.contracts.rerank import (
    CAPABILITY,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    MAX_TEXTS,
    RerankRequest,
    validate_rerank_input,
)
from hearthnet.runtime.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from hearthnet.services.rerank.backend import RerankBackend, RerankResult
    from hearthnet.services.rerank.service import Reranker, RerankService, rerank_descriptor

_HOME = {
    "RerankBackend": "backend",
    "RerankResult": "backend",
    "Reranker": "service",
    "RerankService": "service",
    "rerank_descriptor": "service",
}

__all__ = [
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
]

if not TYPE_CHECKING:  # the type checker sees the imports above, and flags a misspelt name
    __getattr__ = lazy_getattr(__name__, _HOME, globals())
