"""A query embedded with an archive's model: ``embed.text`` with ``params {model}``, over the bus.

Whichever node serves that model answers (one whose embedding backend is a
TEI or OpenAI-compatible server for it, ``[[embedding.openai]]``); the RAG
service never imports an embedder.  No provider of the model -> ``partition``
naming it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hearthnet.bus.api import BusAPI
from hearthnet.errors import BadRequest, InternalError, NotFound, Partition, SchemaMismatch
from hearthnet.wire.vectors import decode_embeddings

__all__ = ["MAX_DIM", "embed_query", "no_provider"]

MAX_DIM = 8192
"""Largest embedding a provider may answer (OpenAI's largest is 3,072)."""


def no_provider(model: str, detail: str = "") -> Partition:
    """The error for a model no reachable node serves, with what to do about it."""
    tail = f" ({detail})" if detail else ""
    return Partition(
        f"no embed.text provider for model {model} is reachable{tail}: a node must serve it, e.g. with an "
        "[[embedding.openai]] entry pointing at a TEI or OpenAI-compatible server for that model"
    )


async def embed_query(bus: BusAPI, model: str, text: str, *, timeout: float) -> npt.NDArray[np.float32]:
    """``text`` embedded (normalised) by a provider of ``model``, as one flat float32 vector."""
    if not bus.providers("embed.text", (1, 0), {"model": model}):
        raise no_provider(model)
    try:
        result = await bus.call(
            "embed.text",
            (1, 0),
            params={"model": model},
            input={"texts": [text], "normalize": True},
            timeout=timeout,
        )
    except (NotFound, SchemaMismatch) as exc:  # the provider went away since it was listed
        raise no_provider(model, exc.code) from exc
    try:
        vectors = decode_embeddings(result.output)
    except BadRequest as exc:  # the provider's answer is malformed, not the caller's request
        raise InternalError(f"embed.text for {model} answered malformed vectors: {exc.message}") from exc
    if vectors.shape[0] != 1 or not 0 < vectors.shape[1] <= MAX_DIM or not np.isfinite(vectors).all():
        raise InternalError(
            f"embed.text for {model} answered {vectors.shape[0]} vectors of {vectors.shape[1]} dimensions "
            f"for one text, or values that are not finite: provider {result.provider or 'unknown'}"
        )
    return np.asarray(vectors[0], dtype=np.float32)
