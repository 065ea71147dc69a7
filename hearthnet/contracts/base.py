"""What every family's contract uses: :class:`Caller` and :class:`StreamCaller` (what a typed
client calls through), :func:`opened` (a streamed call with its input ended, as every typed client
opens one) and the check that a call's input holds only the fields its capability knows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from collections.abc import Set as AbstractSet
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, runtime_checkable

from hearthnet.bus.context import CallResult
from hearthnet.errors import BadRequest

__all__ = [
    "Caller",
    "StreamCaller",
    "Streamed",
    "check_input_keys",
    "given",
    "opened",
    "streamed_result",
    "streamer",
]


class Caller(Protocol):
    """Anything that calls a capability by name: the node's bus (``BusAPI``), the control-socket
    client (``AsyncClient``), the web UI's gated bus for one login."""

    async def call(
        self,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult: ...


class Streamed(Protocol):
    """A streamed call in progress: the handler's frames, then its result."""

    async def end_input(self) -> None: ...

    def frames(self) -> AsyncIterator[dict[str, Any]]: ...

    async def result(self) -> CallResult: ...


@runtime_checkable
class StreamCaller(Caller, Protocol):
    """A :class:`Caller` that also opens streamed calls (progress frames, tokens, file chunks)."""

    def stream(
        self,
        capability: str,
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> AbstractAsyncContextManager[Streamed]: ...


@asynccontextmanager
async def opened(caller: StreamCaller, capability: str, **call: Any) -> AsyncIterator[Streamed]:
    """``capability`` streamed through ``caller`` (``call``: its params, input, timeout and
    provider), its input ended: a typed client sends no input frames."""
    async with caller.stream(capability, **call) as streamed:
        await streamed.end_input()
        yield streamed


def streamer(caller: Caller) -> StreamCaller:
    """``caller`` as a :class:`StreamCaller`; ``TypeError`` if it cannot open a streamed call."""
    if not isinstance(caller, StreamCaller):
        raise TypeError(f"{type(caller).__name__} cannot open a streamed call")
    return caller


async def streamed_result(
    call: AbstractAsyncContextManager[Streamed],
    on_frame: Callable[[dict[str, Any]], None] | None = None,
) -> CallResult:
    """Run a streamed call to its end, each frame handed to ``on_frame``; its result."""
    async with call as s:
        async for frame in s.frames():
            if on_frame is not None:
                on_frame(frame)
        return await s.result()


def given(**fields: Any) -> dict[str, Any]:
    """The fields that are not ``None``: an input leaves out what its caller did not say."""
    return {key: value for key, value in fields.items() if value is not None}


def check_input_keys(input: Mapping[Any, Any], allowed: AbstractSet[str], capability: str = "") -> None:
    """Reject unknown input fields with ``bad_request`` naming (a few of) them (helps catch typos).

    A key may be bytes or a number (a peer's map): it is named, not a ``TypeError``.
    """
    unknown = sorted(str(k)[:40] for k in input if k not in allowed)
    if unknown:
        what = f"{capability} " if capability else ""
        raise BadRequest(f"unknown {what}input field(s): {', '.join(unknown[:8])}")


def checked_texts(input: Mapping[str, Any], *, max_texts: int, max_chars: int, advice: str) -> list[str]:
    """``input.texts``: 1..``max_texts`` strings of at most ``max_chars`` characters each, or
    ``bad_request`` naming what is wrong (``advice`` says what to do with a text that is too long)."""
    texts = input.get("texts")
    if not isinstance(texts, list | tuple):
        raise BadRequest(f"input.texts must be a list of 1..{max_texts} strings")
    if not 1 <= len(texts) <= max_texts:
        raise BadRequest(f"input.texts holds {len(texts)} texts; send 1..{max_texts} per call")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(f"input.texts[{i}] is {type(text).__name__}, not a string")
        if len(text) > max_chars:
            raise BadRequest(
                f"input.texts[{i}] has {len(text)} characters; the limit is {max_chars}, {advice}"
            )
    return list(texts)
