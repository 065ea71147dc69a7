"""The rerank service: ``rerank.text@1.0`` over a cross-encoder server (TEI or a Cohere-style ``/v1/rerank``).

Callers outside this package use only the names exported here.  They load their module on
first use: the node's config reads only ``config`` (no HTTP client) when it parses ``[rerank]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from hearthnet.services.rerank.backend import RerankBackend, RerankResult
    from hearthnet.services.rerank.config import (
        PROTOCOLS,
        RERANK_ENV,
        RerankConfig,
        RerankServerConfig,
        rerank_config,
        rerank_from_env,
    )
    from hearthnet.services.rerank.contract import (
        CAPABILITY,
        MAX_QUERY_CHARS,
        MAX_TEXT_CHARS,
        MAX_TEXTS,
        RerankRequest,
        validate_rerank_input,
    )
    from hearthnet.services.rerank.service import Reranker, RerankService, rerank_descriptor

_HOME = {
    "RerankBackend": "backend",
    "RerankResult": "backend",
    "PROTOCOLS": "config",
    "RERANK_ENV": "config",
    "RerankConfig": "config",
    "RerankServerConfig": "config",
    "rerank_config": "config",
    "rerank_from_env": "config",
    "CAPABILITY": "contract",
    "MAX_QUERY_CHARS": "contract",
    "MAX_TEXT_CHARS": "contract",
    "MAX_TEXTS": "contract",
    "RerankRequest": "contract",
    "validate_rerank_input": "contract",
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
