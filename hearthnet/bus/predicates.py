"""Params-compatibility predicates of the contract's capabilities.

A caller must decide whether a *remote* provider's offered params fit its
request without running that provider's code, so the predicates for the
contract's capabilities live here, beside the bus, and services register
their own with :func:`register_predicate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals


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
}


def register_predicate(capability: str, predicate: ParamsPredicate) -> None:
    _PREDICATES[capability] = predicate


def predicate_for(capability: str) -> ParamsPredicate:
    return _PREDICATES.get(capability, shared_keys_equal)
