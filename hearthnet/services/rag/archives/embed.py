"""A query embedded with an archive's model: ``embed.text`` with ``params {model}``, over the bus.

Whichever node serves that model answers (one whose embedding backend is a
TEI or OpenAI-compatible server for it, ``[[embedding.openai]]``); the RAG
service never imports an embedder.  No provider of the model -> ``partition``
naming it (:func:`hearthnet.contracts.embed.no_provider`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hearthnet.bus.api import BusAPI
from hearthnet.contracts.embed import Embedder, no_provider

__all__ = ["embed_query"]


async def embed_query(bus: BusAPI, model: str, text: str, *, timeout: float) -> npt.NDArray[np.float32]:
    """``text`` embedded (normalised) by a provider of ``model``, as one flat float32 vector."""
    if not bus.providers("embed.text", (1, 0), {"model": model}):
        raise no_provider(model)
    answer = await Embedder(bus, model, timeout).embed([text])
    return np.asarray(answer.vectors[0], dtype=np.float32)
