"""Chat completions from an OpenAI-compatible server, streamed over SSE with httpx.

Works with Ollama, llama.cpp's ``llama-server``, llama-cpp-python, vLLM, LM
Studio and OpenAI.  Every failure maps to a bus error (the table is in
``specs/llm.md``): unreachable -> ``partition``; silent past ``timeout_seconds``
(before the first token: past a deadline from the prompt's size and the
server's measured prefill pace, ``timeout_seconds`` its floor) -> ``timeout``;
HTTP 429 -> ``capacity_exceeded`` with the server's Retry-After; a malformed
stream -> ``internal_error``.  The response is read inside ``async with``: when
the caller cancels or its deadline passes, the HTTP connection is closed and
the server stops generating.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from hearthnet.config.llm import LlmOpenAIConfig
from hearthnet.contracts.llm import ChatRequest
from hearthnet.errors import (
    InternalError,
    Partition,
    Timeout,
)
from hearthnet.runtime.http_backends import read_bounded, retry_after_ms, status_error
from hearthnet.runtime.pace import Pace
from hearthnet.services.llm.sse import SSEDecoder

PREFILL_SECONDS_PER_TOKEN = 0.02
"""A server's pace reading a prompt before any was measured: a slow guess (a small model on a
Raspberry Pi's CPU reads ~50 prompt tokens a second)."""

__all__ = [
    "ChatCompletion",
    "OpenAIChatBackend",
    "OpenAIChatConfig",
    "Usage",
    "plain_prompt",
    "retry_after_ms",
]

MAX_ANSWER_CHARS = 1 << 19
"""An answer longer than this is a server ignoring ``max_tokens``: ``internal_error``, not memory."""

OnDelta = Callable[[str], Awaitable[None]]


OpenAIChatConfig = LlmOpenAIConfig
"""One model on an OpenAI-compatible server: the ``[[llm.openai]]`` table itself (its checks and
``endpoint`` are there), so the node hands its settings over as they are."""


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class ChatCompletion:
    """A finished answer: its text, why it ended, and the server's token counts (if it sent them)."""

    text: str
    finish_reason: str
    usage: Usage | None


def plain_prompt(messages: tuple[tuple[str, str], ...]) -> str:
    """A conversation as one completion prompt for a base model.

    System text first, then ``User:``/``Assistant:`` turns, ending with
    ``Assistant:`` for the model to continue.
    """
    parts: list[str] = []
    for role, content in messages:
        if role == "system":
            parts.append(content.strip() + "\n")
        else:
            parts.append(f"{'User' if role == 'user' else 'Assistant'}: {content.strip()}\n")
    return "".join(parts) + "Assistant:"


class OpenAIChatBackend:
    """One configured model: :meth:`chat` streams an answer, calling ``on_delta`` per piece of text."""

    def __init__(
        self,
        config: OpenAIChatConfig,
        *,
        environ: Mapping[str, str] = os.environ,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``api_key`` given directly (a local server's per-run key) wins over ``api_key_env``."""
        self.config = self.openai = config
        self.model = config.model
        self.context_tokens = config.context_tokens
        self.max_output_tokens = config.max_output_tokens
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = api_key if api_key is not None else config.api_key(environ)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        t = config.timeout_seconds
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(t),
            transport=transport,
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=config.max_concurrent, max_keepalive_connections=config.max_concurrent
            ),
        )
        host = urlsplit(config.base_url).netloc
        self._where = f"LLM server {host} (model {config.model})"
        self.prefill = Pace(per_unit=PREFILL_SECONDS_PER_TOKEN, floor=t, slack=3.0)
        """The server's seconds to the first token per prompt token (a prompt's first-token wait)."""

    def _body(self, request: ChatRequest, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "stream": True, "max_tokens": max_tokens}
        if self.config.prompt_format == "chat":
            body["messages"] = [{"role": r, "content": c} for r, c in request.messages]
        else:
            body["prompt"] = plain_prompt(request.messages)
        if self.config.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        stop = list(request.stop)
        if not stop and self.config.prompt_format == "plain":
            stop = ["\n"]  # a base model goes on to write the next turn itself
        if stop:
            body["stop"] = stop
        return body

    async def chat(self, request: ChatRequest, *, max_tokens: int, on_delta: OnDelta) -> ChatCompletion:
        """Stream one answer; ``on_delta`` is awaited for each non-empty piece, in order.

        The wait for the first token (the server reading the prompt) may last as long as the
        prompt's size and the server's measured pace say; after it, ``timeout_seconds`` of
        silence is a timeout."""
        where = self._where
        units = request.chars // 4
        first_wait = self.prefill.deadline(units, [self.model])
        started = anyio.current_time()
        waited: list[float] = []

        async def first_then(text: str) -> None:
            if not waited:
                waited.append(anyio.current_time() - started)
                self.prefill.record(self.model, units, waited[0])
            await on_delta(text)

        try:
            async with self._client.stream(
                "POST",
                self.config.endpoint,
                json=self._body(request, max_tokens),
                timeout=httpx.Timeout(self.config.timeout_seconds, read=first_wait),
            ) as response:
                if response.status_code != 200:
                    raise await status_error(response, self._where)
                return await self._read_stream(response, first_then)
        except httpx.TimeoutException as exc:
            silent = first_wait if not waited else self.config.timeout_seconds
            if not waited:
                self.prefill.overran([self.model], units, anyio.current_time() - started)
            raise Timeout(f"{where} sent nothing for {silent:g} s ({type(exc).__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise Partition(f"{where} is unreachable or closed the connection: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise InternalError(f"{where} request failed: {type(exc).__name__}") from exc

    async def _read_stream(self, response: httpx.Response, on_delta: OnDelta) -> ChatCompletion:
        if response.headers.get("content-type", "").split(";")[0].strip() == "application/json":
            return await self._read_whole(response, on_delta)  # a server that does not stream
        decoder = SSEDecoder()
        parts: list[str] = []
        size = 0
        finish: str | None = None
        usage: Usage | None = None
        done = False
        async for chunk in response.aiter_bytes():
            for data in decoder.feed(chunk):
                if data.strip() == "[DONE]":
                    done = True
                    break
                text, reason, used = self._parse_chunk(data)
                usage = used or usage
                finish = reason or finish
                if text:
                    size += len(text)
                    if size > MAX_ANSWER_CHARS:
                        raise InternalError(
                            f"{self._where} sent an answer over {MAX_ANSWER_CHARS} characters"
                        )
                    parts.append(text)
                    await on_delta(text)
            if done:
                break
        if not done:
            for data in decoder.close():
                if data.strip() == "[DONE]":
                    done = True
        if finish is None:
            if not done:
                raise InternalError(f"{self._where} ended the stream before the answer was finished")
            finish = "stop"  # [DONE] without a finish_reason: the answer is complete
        return ChatCompletion("".join(parts), finish, usage)

    async def _read_whole(self, response: httpx.Response, on_delta: OnDelta) -> ChatCompletion:
        body = await read_bounded(response, MAX_ANSWER_CHARS * 4)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise InternalError(f"{self._where} answered with malformed JSON") from exc
        text, finish, usage = self._parse_chunk(payload, whole=True)
        if finish is None:
            raise InternalError(f"{self._where} answered without a finish_reason")
        if text:
            await on_delta(text)
        return ChatCompletion(text, finish, usage)

    def _parse_chunk(self, data: str | Any, *, whole: bool = False) -> tuple[str, str | None, Usage | None]:
        """One chunk's text, finish_reason and usage; anything malformed is ``internal_error``."""
        where = self._where
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except (ValueError, RecursionError) as exc:
                raise InternalError(f"{where} sent a stream chunk that is not JSON") from exc
        if not isinstance(data, dict):
            raise InternalError(f"{where} sent a stream chunk that is not an object")
        if "error" in data:
            err = data["error"]
            kind = err.get("type") or err.get("code") if isinstance(err, dict) else None
            raise InternalError(f"{where} reported an error mid-answer ({str(kind or 'no type')[:80]})")
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise InternalError(f"{where} sent a chunk without a 'choices' list")
        text = ""
        finish: str | None = None
        for choice in choices:
            if not isinstance(choice, dict):
                raise InternalError(f"{where} sent a malformed choice")
            if choice.get("index", 0) != 0:
                continue
            piece = _choice_text(choice, whole=whole)
            if piece is None:
                raise InternalError(f"{where} sent a choice without text")
            text += piece
            reason = choice.get("finish_reason")
            if reason is not None:
                if not isinstance(reason, str):
                    raise InternalError(f"{where} sent a finish_reason that is not a string")
                finish = reason[:40]
        return text, finish, _usage(data.get("usage"))

    async def aclose(self) -> None:
        await self._client.aclose()


def _choice_text(choice: dict[str, Any], *, whole: bool) -> str | None:
    """The text of a chat (``delta``/``message``) or completion (``text``) choice; ``None`` if malformed."""
    if "text" in choice:
        value = choice["text"]
    else:
        holder = choice.get("message" if whole else "delta", {})
        if not isinstance(holder, dict):
            return None
        value = holder.get("content")
    if value is None:
        return ""
    return value if isinstance(value, str) else None


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    p, c = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (p, c)):
        return None
    assert isinstance(p, int) and isinstance(c, int)
    return Usage(p, c)
