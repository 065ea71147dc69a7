"""WorkerThreads (hearthnet/runtime/worker_threads.py): results, errors, bounds, cancellation, shutdown."""

from __future__ import annotations

import contextvars
import threading

import anyio
import pytest

from hearthnet.errors import Partition
from hearthnet.runtime.worker_threads import WorkerThreads
from tests.polling import wait_until

pytestmark = pytest.mark.anyio

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


@pytest.fixture(params=[{}, {"use_uvloop": True}], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    return "asyncio", request.param


async def test_runs_in_another_thread_with_the_callers_context_and_raises_its_errors() -> None:
    threads = WorkerThreads(2, "t")
    WHO.set("caller")
    try:
        name, who = await threads.run(lambda: (threading.current_thread().name, WHO.get()))
        assert name.startswith("t") and name != threading.current_thread().name
        assert who == "caller"
        with pytest.raises(ZeroDivisionError):
            await threads.run(lambda: 1 // 0)
    finally:
        threads.close()


async def test_at_most_threads_run_at_once_and_the_rest_wait_their_turn() -> None:
    threads = WorkerThreads(2, "t")
    release = threading.Event()
    running: list[int] = []
    peak: list[int] = []
    lock = threading.Lock()

    def job() -> None:
        with lock:
            running.append(1)
            peak.append(len(running))
        release.wait(10)
        with lock:
            running.pop()

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(threads.run, job)
            await wait_until(lambda: len(peak) == 2)
            assert len(running) == 2  # the other three wait in the queue, not in a thread
            release.set()
        assert len(peak) == 5 and max(peak) == 2
    finally:
        release.set()
        threads.close()


async def test_a_cancelled_caller_waits_for_its_function_then_sees_the_cancellation() -> None:
    """A thread cannot be stopped: the caller leaves only once its function has ended (so what
    the function uses stays valid), and then as cancelled."""
    threads = WorkerThreads(1, "t")
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def job() -> str:
        started.set()
        release.wait(10)
        order.append("job ended")
        return "done"

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await threads.run(job)
                order.append("returned")  # must not happen: the call was cancelled
            finally:
                order.append("caller left")

    try:
        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, scope)
            await wait_until(started.is_set)
            scope.cancel()
            await anyio.lowlevel.checkpoint()
            assert order == []  # the caller still waits for the thread
            release.set()
        assert order == ["job ended", "caller left"] and scope.cancelled_caught
    finally:
        release.set()
        threads.close()


async def test_a_caller_cancelled_while_its_function_waits_in_the_queue_gives_it_up() -> None:
    """A query whose deadline passes while its search waits behind a long read does not wait on:
    its function never runs, and the caller sees the cancellation at once."""
    threads = WorkerThreads(1, "t")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def busy() -> None:
        started.set()
        release.wait(10)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(threads.run, busy)  # holds the only thread
            await wait_until(started.is_set)
            with anyio.move_on_after(0.2) as scope:
                await threads.run(lambda: ran.append("queued"))
            assert scope.cancelled_caught and not release.is_set()  # gave up while busy still runs
            release.set()
        assert await threads.run(lambda: "next") == "next" and ran == []
    finally:
        release.set()
        threads.close()


async def test_closed_threads_refuse_new_work_with_partition() -> None:
    threads = WorkerThreads(1, "t")
    assert await threads.run(lambda: 5) == 5
    threads.close()
    threads.close()  # idempotent
    with pytest.raises(Partition, match="shutting down"):
        await threads.run(lambda: 5)


def test_at_least_one_thread() -> None:
    with pytest.raises(ValueError):
        WorkerThreads(0, "t")
