"""Small async primitives for flow control, one-shot results and waking a parked task.

On asyncio (the node runs on asyncio or uvloop) a waiter is a bare future of the
running loop: a call's answer or a parked worker is woken with one
``set_result``, where an ``anyio.Event`` costs a backend look-up, two objects
and a loop-bound lock per wait, several times the rest of a trivial call's
bookkeeping.  On any other backend the same classes use ``anyio.Event``.
Cancellation is unchanged: anyio's cancel scopes cancel a task waiting on any
future.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from hearthnet.errors import ProtocolError

T = TypeVar("T")


class _ThisThread(threading.local):
    loop: asyncio.AbstractEventLoop | None = None


_this_thread = _ThisThread()
os.register_at_fork(after_in_child=lambda: setattr(_this_thread, "loop", None))


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop running this code, or ``None`` (another backend, or none).

    ``asyncio.get_running_loop()`` asks the kernel for the process id on every call
    (Python 3.11, to notice a fork); a thread runs one loop at a time, so the loop
    last seen in this thread is still the one while it runs (a forked child forgets it).
    """
    loop = _this_thread.loop
    if loop is not None and loop.is_running():
        return loop
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    _this_thread.loop = loop
    return loop


def loop_time() -> float:
    """``anyio.current_time()``, read straight from the running asyncio loop when there is one."""
    loop = running_loop()
    return anyio.current_time() if loop is None else loop.time()


class Wakeup:
    """One task waits (:meth:`wait`) until another calls :meth:`set`; later sets are no-ops."""

    __slots__ = ("_event", "_future", "_set")

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None
        self._event: anyio.Event | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        future = self._future
        if future is not None:
            if not future.done():  # done: its waiter was cancelled
                future.set_result(None)
        elif self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if self._set:
            return
        loop = running_loop()
        if loop is None:  # not on asyncio
            self._event = anyio.Event()
            await self._event.wait()
            return
        future = self._future = loop.create_future()
        await future


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
    """A value (or an exception) delivered exactly once; later deliveries are ignored.

    Any number of tasks may wait; a waiter is made only when one waits before
    the outcome is known (the first one on asyncio: a bare future).
    """

    __slots__ = ("_done", "_error", "_future", "_value", "_waiters")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._future: asyncio.Future[None] | None = None
        self._waiters: list[Wakeup] | None = None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        """The exception delivered, if the outcome was a failure."""
        return self._error

    def set(self, value: T) -> bool:
        return self._finish(value, None)

    def fail(self, error: BaseException) -> bool:
        return self._finish(None, error)

    def _finish(self, value: T | None, error: BaseException | None) -> bool:
        """Deliver the outcome and wake every waiter; ``False`` if one was delivered already."""
        if self._done:
            return False
        self._value, self._error = value, error
        self._done = True
        future = self._future
        if future is not None and not future.done():  # done: its waiter was cancelled
            future.set_result(None)
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            for waiter in waiters:
                waiter.set()
        return True

    async def wait(self) -> T:
        if not self._done:
            loop = running_loop() if self._future is None else None
            if loop is not None:
                future = self._future = loop.create_future()
                await future
            else:
                waiter = Wakeup()
                if self._waiters is None:
                    self._waiters = [waiter]
                else:
                    self._waiters.append(waiter)
                await waiter.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def deliver_within_credit(tx: MemoryObjectSendStream[Any], data: dict[str, Any], what: str) -> None:
    """Queue a peer's frame; its queue holds exactly the credit granted, so a full queue is a violation."""
    try:
        tx.send_nowait(data)
    except anyio.WouldBlock as exc:
        raise ProtocolError(f"peer sent {what} beyond its credit") from exc
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass  # our side stopped listening; the frame is no longer wanted


def credit_amount(msg: dict[str, Any]) -> int:
    """The ``n`` of a peer's ``credit_in`` / ``credit_out`` message, checked."""
    n = msg.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= 1024:
        raise ProtocolError("credit must be a positive integer up to 1024")
    return n
