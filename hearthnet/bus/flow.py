"""Small async primitives for flow control and one-shot results."""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Credit:
    """A counter of frames the other side allows us to send (credit-based flow control)."""

    __slots__ = ("_event", "available")

    def __init__(self, initial: int) -> None:
        self.available = initial
        self._event = anyio.Event()

    async def acquire(self) -> None:
        while self.available <= 0:
            if self._event.is_set():
                self._event = anyio.Event()
            await self._event.wait()
        self.available -= 1

    def grant(self, n: int) -> None:
        self.available += n
        self._event.set()


class OneShot(Generic[T]):
    """A value (or an exception) delivered exactly once; later deliveries are ignored."""

    __slots__ = ("_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    @property
    def error(self) -> BaseException | None:
        """The exception delivered, if the outcome was a failure."""
        return self._error

    def set(self, value: T) -> bool:
        if self._event.is_set():
            return False
        self._value = value
        self._event.set()
        return True

    def fail(self, error: BaseException) -> bool:
        if self._event.is_set():
            return False
        self._error = error
        self._event.set()
        return True

    async def wait(self) -> T:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
