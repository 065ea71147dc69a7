"""Params-compatibility predicates and provider preferences of the contract's capabilities.

A caller must decide whether a *remote* provider's offered params fit its
request without running that provider's code, so the predicates for the
contract's capabilities live here, beside the bus, and services register
their own with :func:`register_predicate`.  A *preference* ranks providers
that all fit: the router tries a provider of a higher rank first, whatever its
latency or locality (``rag.query``: the host advertising more chunks of the
corpus, so two hosts of one corpus name never send callers to the smaller copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals

Preference = Callable[[Mapping[str, Any]], int]
"""``preference(offered_params) -> rank``: among providers that fit, a higher rank is tried first."""


def shared_keys_equal(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """Every requested key must be offered with the same value."""
    return all(key in offered and offered[key] == value for key, value in requested.items())


def ingest_predicate(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """``rag.ingest``: the provider hosts the corpus, or accepts new corpora."""
    corpus = requested.get("corpus")
    if corpus is None:
        return True
    hosted = offered.get("corpora") or []
    return (isinstance(hosted, list) and corpus in hosted) or bool(offered.get("accepts_new"))


_PREDICATES: dict[str, ParamsPredicate] = {
    "rag.ingest": ingest_predicate,
    # the model decides; its window and answer length are advertised, not asked for
    "llm.chat": params_key_equals("model"),
    "rerank.text": params_key_equals("model"),
}


def register_predicate(capability: str, predicate: ParamsPredicate) -> None:
    _PREDICATES[capability] = predicate


def predicate_for(capability: str) -> ParamsPredicate:
    return _PREDICATES.get(capability, shared_keys_equal)


def advertised_chunks(offered: Mapping[str, Any]) -> int:
    """A corpus host's rank: the chunks it advertises (0 if it says nothing: an older node)."""
    chunks = offered.get("chunks")
    return chunks if type(chunks) is int and chunks > 0 else 0


_PREFERENCES: dict[str, Preference] = {
    "rag.query": advertised_chunks,
    "rag.list_documents": advertised_chunks,
}


def preference_for(capability: str) -> Preference | None:
    """How to rank the providers of ``capability`` that fit, or ``None``: all rank alike."""
    return _PREFERENCES.get(capability)
