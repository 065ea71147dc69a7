"""The interface every embedding backend implements, and what it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["EmbedBatch", "EmbeddingBackend", "l2_normalize"]


@dataclass(frozen=True)
class EmbedBatch:
    """Vectors for one request, in input order.

    ``vectors`` is float32 ``(n, dim)``; ``tokens`` counts the tokens the model
    actually read (after truncation, special tokens included); ``truncated``
    counts inputs cut at the model's window.
    """

    vectors: npt.NDArray[np.float32]
    tokens: int
    truncated: int


class EmbeddingBackend(Protocol):
    """One model served by this node (ONNX in-process, or an OpenAI-compatible server)."""

    model: str
    dim: int
    max_tokens: int

    async def embed(self, texts: Sequence[str], *, normalize: bool, bulk: bool = False) -> EmbedBatch:
        """``bulk`` work (an ingest's chunks) yields to the rest (queries) where the backend can."""
        ...

    async def aclose(self) -> None: ...


def l2_normalize(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (an all-zero row stays zero)."""
    norms: npt.NDArray[np.float32] = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out
