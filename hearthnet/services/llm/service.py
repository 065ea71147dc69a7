"""``llm.chat@1.0``: one registration per configured model, answers streamed as ``{delta}`` frames.

Input ``{messages: [{role, content}], max_tokens?, temperature?, stop?}``;
output ``{message: {role: "assistant", content}, finish_reason, usage:
{prompt_tokens, completion_tokens}}``; meta ``{model, ms, ttft_ms,
usage_estimated, prompt_tokens_estimate}``.  The prompt is measured (a
conservative estimate) before any backend is asked, so a prompt over the
window is ``bad_request`` naming both numbers.  Messages' content is never logged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import structlog

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler
from hearthnet.contracts.llm import (
    CAPABILITY,
    PREDICATE,
    VERSION,
    ChatRequest,
    estimate_prompt_tokens,
    estimate_tokens,
    validate_chat_input,
)
from hearthnet.errors import BadRequest, NotFound, Timeout
from hearthnet.services.base import ModelService, PlannedBackend
from hearthnet.services.llm.local import LocalChatBackend, LocalLlmConfig, LocalUnavailable
from hearthnet.services.llm.openai_backend import ChatCompletion, OnDelta, OpenAIChatBackend, OpenAIChatConfig

__all__ = ["ChatBackend", "LlmConfig", "LlmService", "chat_descriptor", "make_handler"]

log = structlog.get_logger("hearthnet.llm")

ESTIMATE_ON_LOOP_CHARS = 20_000
"""Prompts up to this many characters are measured on the event loop; longer ones in a thread."""


class ChatBackend(Protocol):
    """What the handler needs of a model: its limits and a streamed answer."""

    model: str
    context_tokens: int
    max_output_tokens: int

    @property
    def openai(self) -> OpenAIChatConfig: ...

    async def chat(self, request: ChatRequest, *, max_tokens: int, on_delta: OnDelta) -> ChatCompletion: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class LlmConfig:
    """What the node config decides about chat models."""

    openai: tuple[OpenAIChatConfig, ...] = ()
    local: LocalLlmConfig | None = None


def chat_descriptor(backend: ChatBackend) -> CapabilityDescriptor:
    cfg = backend.openai
    return CapabilityDescriptor(
        name=CAPABILITY,
        version=VERSION,
        params={
            "model": backend.model,
            "context_tokens": backend.context_tokens,
            "max_output_tokens": backend.max_output_tokens,
        },
        max_concurrent=cfg.max_concurrent,
        timeout_seconds=cfg.call_timeout_seconds,
        idempotent=True,  # no side effects: a refused call may go to another provider
        streaming=True,
        description=(
            f"{backend.model}: chat, window {backend.context_tokens} tokens, "
            f"answers up to {backend.max_output_tokens}"
        ),
    )


async def _estimate(request: ChatRequest) -> int:
    if request.chars <= ESTIMATE_ON_LOOP_CHARS:
        return estimate_prompt_tokens(request.messages)
    return await anyio.to_thread.run_sync(estimate_prompt_tokens, request.messages)


def make_handler(backend: ChatBackend) -> Handler:
    async def handle(ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        started = time.perf_counter()
        wanted = ctx.params.get("model")
        if wanted is not None and wanted != backend.model:
            raise NotFound(f"model {wanted!r:.80} is not served here (this provider: {backend.model})")
        request = validate_chat_input(ctx.input, max_output_tokens=backend.max_output_tokens)
        max_tokens = request.max_tokens or backend.max_output_tokens
        prompt_estimate = await _estimate(request)
        if prompt_estimate + max_tokens > backend.context_tokens:
            raise BadRequest(
                f"the prompt takes about {prompt_estimate} tokens and the answer up to {max_tokens}: "
                f"{prompt_estimate + max_tokens} is over the context window of {backend.context_tokens} "
                f"tokens of {backend.model}; send less context or ask for a shorter answer (max_tokens)"
            )
        first: float | None = None
        deltas = 0

        async def on_delta(text: str) -> None:
            nonlocal first, deltas
            if first is None:
                first = time.perf_counter()
            deltas += 1
            await ctx.send({"delta": text})

        with anyio.move_on_after(ctx.remaining()) as scope:
            completion = await backend.chat(request, max_tokens=max_tokens, on_delta=on_delta)
        if scope.cancelled_caught:
            raise Timeout(
                f"{backend.model} did not finish its answer within the call's deadline "
                f"({deltas} pieces sent so far)"
            )
        estimated = completion.usage is None
        if completion.usage is None:
            prompt_tokens, completion_tokens = prompt_estimate, estimate_tokens(completion.text)
        else:
            prompt_tokens = completion.usage.prompt_tokens
            completion_tokens = completion.usage.completion_tokens
        ms = round((time.perf_counter() - started) * 1000, 1)
        ttft_ms = None if first is None else round((first - started) * 1000, 1)
        log.info(
            "llm.chat",
            trace_id=ctx.trace_id,
            model=backend.model,
            messages=len(request.messages),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=completion.finish_reason,
            ms=ms,
            ttft_ms=ttft_ms,
        )
        output = {
            "message": {"role": "assistant", "content": completion.text},
            "finish_reason": completion.finish_reason,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
        meta = {
            "model": backend.model,
            "ms": ms,
            "ttft_ms": ttft_ms,
            "usage_estimated": estimated,
            "prompt_tokens_estimate": prompt_estimate,
        }
        return output, meta

    return handle


class LlmService(ModelService[ChatBackend]):
    """Serves ``llm.chat`` for each configured model that could be set up."""

    name = "llm"
    what = "llm backends"
    predicate = PREDICATE

    def __init__(self, config: LlmConfig | None = None, *, backends: Sequence[ChatBackend] = ()) -> None:
        """``backends`` are used as given (tests, custom backends); ``config`` builds more at ``start``."""
        super().__init__(backends)
        self.config = config or LlmConfig()

    def planned(self) -> list[PlannedBackend[ChatBackend]]:
        plans: list[PlannedBackend[ChatBackend]] = []
        for oc in self.config.openai:  # BadRequest: e.g. the API key variable is not set

            async def connect(oc: OpenAIChatConfig = oc) -> ChatBackend:
                return OpenAIChatBackend(oc)

            plans.append(PlannedBackend(oc.model, connect))
        local = self.config.local
        if local is not None:

            async def start_local() -> ChatBackend:
                backend = LocalChatBackend(local)
                backend.start()
                return backend

            plans.append(PlannedBackend(local.model, start_local, (LocalUnavailable,)))
        return plans

    def descriptor(self, backend: ChatBackend) -> CapabilityDescriptor:
        return chat_descriptor(backend)

    def handler(self, backend: ChatBackend) -> Handler:
        return make_handler(backend)

    def describe(self, backend: ChatBackend) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "model": backend.model,
            "context_tokens": backend.context_tokens,
            "max_output_tokens": backend.max_output_tokens,
        }
        if isinstance(backend, LocalChatBackend):
            entry["local"] = backend.health()
        return entry
