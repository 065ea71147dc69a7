"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` server (TEI, Ollama, vLLM, OpenAI).

Every failure maps to a bus error: connection refused/reset -> ``Partition``,
a timeout -> ``Timeout``, an HTTP error status or a malformed, short or
wrong-dimension answer -> ``InternalError``.  Never a zero vector.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np

from hearthnet.config.embedding import DEFAULT_TIMEOUT_SECONDS, OpenAIBackendConfig
from hearthnet.errors import InternalError, Partition, Timeout
from hearthnet.runtime.http_backends import status_error
from hearthnet.services.embedding.backend import EmbedBatch, l2_normalize

__all__ = ["OpenAIEmbeddingBackend"]


class OpenAIEmbeddingBackend:
    """A remote model as an :class:`~hearthnet.services.embedding.backend.EmbeddingBackend`;
    ``timeout_seconds`` applies unless its config gives its own (``[embedding] timeout_seconds``)."""

    def __init__(
        self,
        config: OpenAIBackendConfig,
        *,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        environ: Mapping[str, str] = os.environ,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.model = config.model
        self.dim = config.dim
        self.max_tokens = config.max_tokens
        self._timeout = timeout_seconds if config.timeout_seconds is None else config.timeout_seconds
        headers = {"Content-Type": "application/json"}
        key = config.api_key(environ)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        self._url = config.base_url.rstrip("/") + "/v1/embeddings"
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(self._timeout), transport=transport, follow_redirects=False
        )

    @property
    def timeout_seconds(self) -> float:
        return self._timeout

    async def embed(self, texts: Sequence[str], *, normalize: bool, bulk: bool = False) -> EmbedBatch:
        parts = []
        tokens = 0
        step = self.config.max_texts_per_request
        for start in range(0, len(texts), step):
            vectors, used = await self._post(list(texts[start : start + step]))
            parts.append(vectors)
            tokens += used
        matrix = np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)
        # The server truncates (or rejects) on its own; the count of cut inputs is not reported back.
        return EmbedBatch(vectors=l2_normalize(matrix) if normalize else matrix, tokens=tokens, truncated=0)

    async def _post(self, texts: list[str]) -> tuple[np.ndarray[Any, np.dtype[np.float32]], int]:
        where = f"embedding server {self.config.base_url} (model {self.model})"
        try:
            resp = await self._client.post(self._url, json={"model": self.model, "input": texts})
        except httpx.TimeoutException as exc:
            raise Timeout(f"{where} did not answer within {self._timeout:g} s") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise Partition(f"{where} is unreachable: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise InternalError(f"{where} request failed: {type(exc).__name__}") from exc
        if resp.status_code != 200:
            raise await status_error(resp, where)
        try:
            body = resp.json()
        except ValueError as exc:
            raise InternalError(f"{where} answered with malformed JSON") from exc
        vectors = self._parse(body, len(texts), where)
        usage = body.get("usage") if isinstance(body, dict) else None
        used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(used, int) or isinstance(used, bool) or used < 0:
            used = 0
        return vectors, used

    def _parse(self, body: Any, count: int, where: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise InternalError(f"{where} answered without a 'data' list")
        if len(data) != count:
            raise InternalError(f"{where} returned {len(data)} embeddings for {count} texts")
        out = np.zeros((count, self.dim), dtype=np.float32)
        seen = [False] * count
        for pos, item in enumerate(data):
            if not isinstance(item, dict):
                raise InternalError(f"{where} answered a malformed embedding entry")
            index = item.get("index", pos)
            emb = item.get("embedding")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or seen[index]:
                raise InternalError(f"{where} answered a bad or duplicate index")
            if not isinstance(emb, list):
                raise InternalError(f"{where} answered a non-list embedding (ask for float, not base64)")
            if len(emb) != self.dim:
                raise InternalError(f"{where} returned {len(emb)}-d vectors, configured dim is {self.dim}")
            try:
                row = np.asarray(emb, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise InternalError(f"{where} answered non-numeric embedding values") from exc
            if row.ndim != 1 or not np.all(np.isfinite(row)):
                raise InternalError(f"{where} answered non-finite embedding values")
            if not np.any(row):
                raise InternalError(f"{where} answered an all-zero vector")
            out[index] = row
            seen[index] = True
        return out

    async def aclose(self) -> None:
        await self._client.aclose()
