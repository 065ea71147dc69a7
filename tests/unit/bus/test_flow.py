"""The bus's small waiting primitives, on asyncio (bare futures) and on trio (anyio events)."""

from __future__ import annotations

import math

import anyio
import pytest

from hearthnet.bus.flow import OneShot, Wakeup, loop_time


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_a_value_set_before_anyone_waits_is_returned_at_once() -> None:
    shot: OneShot[int] = OneShot()
    assert shot.set(1) and not shot.set(2) and not shot.fail(ValueError())
    with anyio.fail_after(1):
        assert await shot.wait() == 1
    assert shot.done and shot.error is None


@pytest.mark.anyio
async def test_every_waiter_gets_the_outcome_and_a_failure_is_raised_to_each() -> None:
    shot: OneShot[int] = OneShot()
    seen: list[str] = []

    async def wait() -> None:
        try:
            await shot.wait()
        except KeyError:
            seen.append("failed")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert not shot.done
            shot.fail(KeyError("x"))
    assert seen == ["failed"] * 3
    assert isinstance(shot.error, KeyError)


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_the_others_and_later_delivery_intact() -> None:
    shot: OneShot[str] = OneShot()
    got: list[str] = []

    async def wait() -> None:
        got.append(await shot.wait())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            with anyio.move_on_after(0.05) as gave_up:
                await shot.wait()
            assert gave_up.cancelled_caught
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            shot.set("answer")
    assert got == ["answer"]
    assert await shot.wait() == "answer"


@pytest.mark.anyio
async def test_a_wakeup_set_before_the_wait_does_not_block_and_sets_once() -> None:
    early = Wakeup()
    early.set()
    early.set()
    with anyio.fail_after(1):
        await early.wait()
    late = Wakeup()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(late.wait)
            await anyio.wait_all_tasks_blocked()
            late.set()


@pytest.mark.anyio
async def test_loop_time_is_the_clock_of_anyio_deadlines() -> None:
    before = anyio.current_time()
    now = loop_time()
    after = anyio.current_time()
    assert before - 1e-3 <= now <= after + 1e-3
    assert math.isfinite(now)


def test_running_loop_is_the_loop_running_now_in_this_thread() -> None:
    """Each new loop in a thread is seen (not the last one cached), and another thread sees its own."""
    import asyncio
    import threading

    from hearthnet.bus.flow import running_loop

    async def check() -> bool:
        return running_loop() is asyncio.get_running_loop()

    assert running_loop() is None
    assert anyio.run(check) and anyio.run(check)  # a second loop, same thread
    seen: list[bool] = []
    worker = threading.Thread(target=lambda: seen.append(anyio.run(check)))
    worker.start()
    worker.join()
    assert seen == [True]
    assert running_loop() is None  # the last loop here has stopped

    async def under_trio() -> bool:
        return running_loop() is None

    assert anyio.run(under_trio, backend="trio")
