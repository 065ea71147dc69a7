"""Relevance scores from a cross-encoder server over HTTP, in one of two protocols.

- ``tei``: Text Embeddings Inference, ``POST {base_url}/rerank`` ``{query, texts, truncate,
  raw_scores, return_text}`` -> ``[{index, score}]`` (sorted by score, not by index).
- ``cohere``: ``POST {base_url}/v1/rerank`` ``{model, query, documents, top_n, return_documents}``
  -> ``{results: [{index, relevance_score}]}`` (Cohere, Jina, vLLM, llama.cpp's server).

Inputs over ``max_texts`` are split into batches, sent concurrently (at most
``max_concurrent`` requests in flight per server) and stitched back by index, so
the scores come in the input's order.  Every failure maps to a bus error:
unreachable -> ``partition``, silent past ``timeout_seconds`` -> ``timeout``,
HTTP 429 -> ``capacity_exceeded`` with the server's Retry-After, a malformed,
short or out-of-range answer -> ``internal_error``.  Texts are never logged.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from hearthnet.config.rerank import RerankServerConfig
from hearthnet.errors import (
    BusError,
    InternalError,
    NotFound,
    Partition,
    Timeout,
    unwrap_group,
)
from hearthnet.runtime.http_backends import read_bounded, retry_after_ms, status_error

__all__ = ["RerankBackend", "RerankResult", "retry_after_ms"]

MAX_BODY = 8 * 1024 * 1024
"""Bytes of one answer read at most (a server that sends the texts back despite being asked not to)."""


@dataclass(frozen=True)
class RerankResult:
    """One score per input text, in the input's order, and how many HTTP requests it took."""

    scores: list[float]
    requests: int


class RerankBackend:
    """One configured reranking model: :meth:`score` asks its server for every text's relevance."""

    def __init__(
        self,
        config: RerankServerConfig,
        *,
        environ: Mapping[str, str] = os.environ,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``bad_request`` when the API key variable ``api_key_env`` names is not set."""
        self.config = config
        self.model = config.model
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = config.api_key(environ)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(config.timeout_seconds),
            transport=transport,
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=config.max_concurrent, max_keepalive_connections=config.max_concurrent
            ),
        )
        self._limiter = anyio.CapacityLimiter(config.max_concurrent)
        self._where = f"rerank server {urlsplit(config.base_url).netloc} (model {config.model})"

    async def score(self, query: str, texts: Sequence[str]) -> RerankResult:
        """Every text's score against ``query``, in the order of ``texts`` (at least one text)."""
        step = self.config.max_texts
        starts = range(0, len(texts), step)
        scores = [0.0] * len(texts)

        async def batch(start: int) -> None:
            part = list(texts[start : start + step])
            async with self._limiter:
                scores[start : start + len(part)] = await self._post(query, part)

        if len(starts) == 1:
            await batch(0)
        else:
            try:
                async with anyio.create_task_group() as tg:
                    for start in starts:
                        tg.start_soon(batch, start)
            except BaseExceptionGroup as group:
                raise unwrap_group(group) from None
        return RerankResult(scores, len(starts))

    def _body(self, query: str, texts: list[str]) -> dict[str, Any]:
        if self.config.protocol == "tei":
            # truncate: a passage longer than the model's window is cut, not refused
            return {
                "query": query,
                "texts": texts,
                "truncate": True,
                "raw_scores": False,
                "return_text": False,
            }
        return {
            "model": self.model,
            "query": query,
            "documents": texts,
            "top_n": len(texts),
            "return_documents": False,
        }

    async def _post(self, query: str, texts: list[str]) -> list[float]:
        where = self._where
        try:
            async with self._client.stream(
                "POST", self.config.endpoint, json=self._body(query, texts)
            ) as response:
                if response.status_code != 200:
                    raise await self._status_error(response, len(texts))
                raw = await read_bounded(response, MAX_BODY, where)
        except httpx.TimeoutException as exc:
            raise Timeout(
                f"{where} sent nothing for {self.config.timeout_seconds:g} s ({type(exc).__name__})"
            ) from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise Partition(f"{where} is unreachable or closed the connection: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise InternalError(f"{where} request failed: {type(exc).__name__}") from exc
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InternalError(f"{where} answered with malformed JSON") from exc
        return self._parse(body, len(texts))

    def _parse(self, body: Any, count: int) -> list[float]:
        """The scores of one answer by index; anything missing, repeated or out of range is an error."""
        where = self._where
        if self.config.protocol == "tei":
            entries, field = body, "score"
            if not isinstance(entries, list):
                raise InternalError(f"{where} answered something other than a list of {{index, score}}")
        else:
            entries = body.get("results") if isinstance(body, dict) else None
            field = "relevance_score"
            if not isinstance(entries, list):
                raise InternalError(f"{where} answered without a 'results' list")
        if len(entries) != count:
            raise InternalError(f"{where} returned {len(entries)} scores for {count} texts")
        out: list[float | None] = [None] * count
        for entry in entries:
            index = entry.get("index") if isinstance(entry, dict) else None
            value = entry.get(field) if isinstance(entry, dict) else None
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise InternalError(f"{where} answered an entry without a valid index (0..{count - 1})")
            if out[index] is not None:
                raise InternalError(f"{where} answered index {index} twice")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InternalError(f"{where} answered a {field} that is not a finite number")
            out[index] = float(value)
        return [s for s in out if s is not None]  # all present: count entries, each index once

    async def _status_error(self, response: httpx.Response, count: int) -> BusError:
        where = self._where
        path = urlsplit(self.config.endpoint).path
        return await status_error(
            response,
            where,
            {
                413: lambda detail: InternalError(
                    f"{where} refused a request of {count} texts as too large (HTTP 413){detail}: "
                    "lower max_texts in its [[rerank.servers]] table to the server's batch limit"
                ),
                404: lambda detail: NotFound(
                    f"{where} has no {path} or does not know the model "
                    f"(HTTP 404): check protocol and base_url{detail}"
                ),
            },
        )

    async def aclose(self) -> None:
        await self._client.aclose()
