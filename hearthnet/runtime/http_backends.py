"""What every OpenAI-compatible backend (chat, rerank, embeddings) says of an HTTP answer that is
not a success, written once: the status mapped onto the error tree, the server's own message cut
short, and ``Retry-After`` (seconds or an HTTP date) read into ``retry_after_ms``.

- 429, or 503 with ``Retry-After`` -> ``capacity_exceeded`` with the server's wait;
- 400, 413, 422 -> ``bad_request``; 401, 403 -> ``internal_error`` (this node's API key);
- 404 -> ``not_found``; 502, 503 -> ``partition``; 504 -> ``timeout``; anything else ->
  ``internal_error``.  A backend overrides a status where it can say more (rerank's 413 names
  the setting to lower).
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    Timeout,
)

__all__ = [
    "DEFAULT_RETRY_MS",
    "MAX_ERROR_BODY",
    "MAX_RETRY_MS",
    "error_detail",
    "read_bounded",
    "retry_after_ms",
    "status_error",
]

DEFAULT_RETRY_MS = 1000
MAX_RETRY_MS = 3_600_000
MAX_ERROR_BODY = 64 * 1024
"""Bytes of an error answer read for its message."""


def retry_after_ms(value: str | None, *, now: float | None = None) -> int:
    """A Retry-After header (seconds, or an HTTP date) in milliseconds; 1 s when absent or unreadable."""
    if value is None:
        return DEFAULT_RETRY_MS
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return DEFAULT_RETRY_MS
        if when.tzinfo is None:
            return DEFAULT_RETRY_MS
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return DEFAULT_RETRY_MS
    return min(MAX_RETRY_MS, max(0, round(seconds * 1000)))


async def read_bounded(response: httpx.Response, limit: int, where: str = "the server") -> bytes:
    """The answer's body, ``internal_error`` once it passes ``limit`` bytes."""
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) > limit:
            raise InternalError(f"{where} sent an answer over {limit} bytes")
    return bytes(out)


async def error_detail(response: httpx.Response) -> str:
    """``": <the server's error message>"`` (cut short), or nothing if it sent none.

    OpenAI-style servers send ``{error: {message}}``, TEI ``{error, error_type}``, Cohere
    ``{message}``, FastAPI servers (Jina) ``{detail}``.
    """
    try:
        payload = json.loads(await read_bounded(response, MAX_ERROR_BODY))
    except (ValueError, RecursionError, BusError, httpx.HTTPError):
        return ""
    message: Any = None
    if isinstance(payload, dict):
        for key in ("error", "message", "detail"):
            message = payload.get(key)
            if isinstance(message, dict):
                message = message.get("message")
            if isinstance(message, str) and message.strip():
                break
    if not isinstance(message, str) or not message.strip():
        return ""
    return ": " + " ".join(message.split())[:300]


async def status_error(
    response: httpx.Response,
    where: str,
    overrides: Mapping[int, Callable[[str], BusError]] | None = None,
) -> BusError:
    """The error a non-success answer of ``where`` (e.g. "LLM server X (model m)") is; a status in
    ``overrides`` is made by its function from the server's message (``": ..."`` or "")."""
    status = response.status_code
    if status == 429 or (status == 503 and "retry-after" in response.headers):
        return CapacityExceeded(
            f"{where} is busy (HTTP {status})",
            retry_after_ms=retry_after_ms(response.headers.get("retry-after")),
        )
    detail = await error_detail(response)
    if overrides and status in overrides:
        return overrides[status](detail)
    if status in (400, 413, 422):
        return BadRequest(f"{where} refused the request (HTTP {status}){detail}")
    if status in (401, 403):
        return InternalError(f"{where} refused this node's API key (HTTP {status}): check api_key_env")
    if status == 404:
        return NotFound(f"{where} does not know the model or endpoint (HTTP 404){detail}")
    if status in (502, 503):
        return Partition(f"{where} is not reachable behind its gateway or not ready (HTTP {status})")
    if status == 504:
        return Timeout(f"{where}'s gateway timed out (HTTP 504)")
    return InternalError(f"{where} answered HTTP {status}{detail}")
