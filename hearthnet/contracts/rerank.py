"""The ``rerank.text@1.0`` contract: input shape, limits, the checked request and the
remote-provider predicate (the model decides).

Pure code (no I/O): the service checks every call with :func:`validate_rerank_input`
before any server is asked; a caller may check its request with the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.descriptors import ParamsPredicate, params_key_equals
from hearthnet.contracts.base import Caller, check_input_keys, checked_texts
from hearthnet.errors import BadRequest

__all__ = [
    "CAPABILITY",
    "MAX_QUERY_CHARS",
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "PREDICATE",
    "PREDICATES",
    "VERSION",
    "RerankRequest",
    "rerank_texts",
    "validate_rerank_input",
]

CAPABILITY = "rerank.text"
VERSION = (1, 0)
MAX_QUERY_CHARS = 8192
MAX_TEXTS = 256
MAX_TEXT_CHARS = 8192
_INPUT_KEYS = frozenset({"query", "texts"})

PREDICATE: ParamsPredicate = params_key_equals("model")
"""A provider fits when it serves the model asked for (a caller that names none takes any)."""
PREDICATES: Mapping[str, ParamsPredicate] = {CAPABILITY: PREDICATE}


@dataclass(frozen=True)
class RerankRequest:
    """A checked ``rerank.text`` input: the query and the texts to score against it, in order."""

    query: str
    texts: tuple[str, ...]


def validate_rerank_input(input: Mapping[str, Any]) -> RerankRequest:
    """``input`` -> a :class:`RerankRequest`, or ``BadRequest`` naming the field that is wrong."""
    if not isinstance(input, Mapping):
        raise BadRequest("rerank.text input must be a map {query, texts}")
    check_input_keys(input, _INPUT_KEYS, CAPABILITY)
    query = input.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("input.query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"input.query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    texts = checked_texts(input, max_texts=MAX_TEXTS, max_chars=MAX_TEXT_CHARS, advice="cut it")
    return RerankRequest(query=query, texts=tuple(texts))


async def rerank_texts(
    caller: Caller, query: str, texts: list[str], *, model: str | None = None, timeout: float | None = None
) -> list[float]:
    """``rerank.text`` as a front door calls it: one score per text, in order (any model, or ``model``)."""
    result = await caller.call(
        CAPABILITY,
        params={} if model is None else {"model": model},
        input={"query": query, "texts": texts},
        timeout=timeout,
    )
    scores = result.output.get("scores")
    if not isinstance(scores, list) or len(scores) != len(texts):
        raise BadRequest("the reranker answered with a wrong number of scores")
    return [float(s) for s in scores]
