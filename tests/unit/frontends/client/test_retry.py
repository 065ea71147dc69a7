"""The client retries ``capacity_exceeded`` with jittered backoff, within the call's deadline.

A real ``ControlServer`` on a real bus, driven by the real client: a capability with few slots
refuses the calls beyond them with a retry hint, and the client sends those again.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community import Level
from hearthnet.errors import CapacityExceeded
from hearthnet.frontends.client import client as client_module
from hearthnet.frontends.client.client import AsyncClient, Client, retry_wait
from hearthnet.frontends.control.server import ControlServer
from hearthnet.identity import Identity
from tests.polling import wait_until


class Node:
    """A bus with ``test.slot`` (2 slots, plain), ``test.feed`` (1 slot, streamed) and ``test.full``
    (refuses without a hint, as a full disk does), behind a control socket."""

    def __init__(self) -> None:
        self.bus = CapabilityBus(
            Identity.generate(), level_of=lambda _n: Level.ANCHOR, community_id=lambda: "hc1:t", name="n"
        )
        self.gate = anyio.Event()
        self.gate.set()
        self.running = 0
        self.full_calls = 0
        d = CapabilityDescriptor
        self.bus.register(Registration(d("test.slot", (1, 0), max_concurrent=2, local_only=True), self._slot))
        self.bus.register(
            Registration(
                d("test.feed", (1, 0), max_concurrent=1, local_only=True, streaming=True), self._feed
            )
        )
        self.bus.register(Registration(d("test.full", (1, 0), local_only=True), self._full))

    async def _slot(self, ctx: CallContext) -> dict[str, Any]:
        self.running += 1
        try:
            await self.gate.wait()
            await anyio.sleep(0.02)  # a call's work: the slots stay busy a little
        finally:
            self.running -= 1
        return {"n": ctx.input.get("n")}

    async def _feed(self, ctx: CallContext) -> dict[str, Any]:
        self.running += 1
        try:
            await self.gate.wait()
            for i in range(3):
                await ctx.send({"i": i})
        finally:
            self.running -= 1
        return {"done": True}

    async def _full(self, ctx: CallContext) -> dict[str, Any]:
        self.full_calls += 1
        raise CapacityExceeded("the blob store is full")

    def refusals(self, ref: str) -> int:
        return int(self.bus.stats.snapshot()[ref]["errors_by_code"].get("capacity_exceeded", 0))


@asynccontextmanager
async def node(home: Path) -> AsyncIterator[Node]:
    n = Node()
    async with anyio.create_task_group() as tg:
        await tg.start(ControlServer(home / "control.sock", n.bus).run)
        try:
            yield n
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_calls_refused_for_capacity_are_sent_again_until_all_succeed(tmp_path: Path) -> None:
    async with node(tmp_path) as n:
        results: list[int] = []

        async def one(i: int) -> None:
            out = await AsyncClient(tmp_path).call("test.slot", input={"n": i}, timeout=20)
            results.append(out.output["n"])

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(24):
                    tg.start_soon(one, i)
        assert sorted(results) == list(range(24))
        assert n.refusals("test.slot@1.0") > 0  # the retry path was taken, not luck

        # Without retries the same burst is refused, each refusal with its hint.
        refused: list[CapacityExceeded] = []

        async def once(i: int) -> None:
            try:
                await AsyncClient(tmp_path, retry_capacity=False).call(
                    "test.slot", input={"n": i}, timeout=20
                )
            except CapacityExceeded as exc:
                refused.append(exc)

        n.gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(once, i)
            await wait_until(lambda: len(refused) == 4)
            n.gate.set()
        assert all(e.retry_after_ms for e in refused)


@pytest.mark.anyio
async def test_a_streamed_call_refused_before_its_first_frame_is_sent_again(tmp_path: Path) -> None:
    async with node(tmp_path) as n:
        n.gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            holder: list[Any] = []

            async def hold() -> None:
                holder.append(await AsyncClient(tmp_path).call("test.feed", timeout=20))

            tg.start_soon(hold)
            await wait_until(lambda: n.running == 1)
            frames: list[dict[str, Any]] = []
            async with AsyncClient(tmp_path).stream("test.feed", timeout=20) as call:
                # refused at once (the one slot is held), then sent again until the slot frees
                await wait_until(lambda: n.refusals("test.feed@1.0") >= 1)
                n.gate.set()
                async for frame in call.frames():
                    frames.append(frame)
                result = await call.result()
        assert frames == [{"i": 0}, {"i": 1}, {"i": 2}] and result.output == {"done": True}
        assert holder[0].output == {"done": True}

        # The blocking client retries the same way.
        n.gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: AsyncClient(tmp_path).call("test.feed", timeout=20))
            await wait_until(lambda: n.running == 1)

            def blocking() -> list[Any]:
                return list(Client(tmp_path).stream("test.feed", timeout=20))

            async def release_later() -> None:
                await wait_until(lambda: n.refusals("test.feed@1.0") >= 2)
                n.gate.set()

            tg.start_soon(release_later)
            items = await anyio.to_thread.run_sync(blocking)
        assert items[:3] == [{"i": 0}, {"i": 1}, {"i": 2}] and items[3].output == {"done": True}


@pytest.mark.anyio
async def test_retries_end_with_the_deadline_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node(tmp_path) as n:
        n.gate = anyio.Event()  # the slots stay taken
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(lambda: AsyncClient(tmp_path).call("test.slot", timeout=20))
            await wait_until(lambda: n.running == 2)

            started = anyio.current_time()
            with pytest.raises(
                CapacityExceeded, match=r"still refused after ([2-9]|\d\d+) tries over"
            ) as refused:
                await AsyncClient(tmp_path).call("test.slot", timeout=0.6)
            took = anyio.current_time() - started
            # Retried, and gave up within its timeout: no retry is sent that could not finish in
            # it (slack for a loaded machine's last refusal to come back).
            assert took <= 0.6 + 0.4, took
            assert refused.value.retry_after_ms

            monkeypatch.setattr(client_module, "CAPACITY_RETRY_SECONDS", 0.5)
            started = anyio.current_time()
            with pytest.raises(CapacityExceeded, match="still refused"):
                await AsyncClient(tmp_path).call("test.slot")  # no timeout: CAPACITY_RETRY_SECONDS
            assert anyio.current_time() - started <= 0.5 + 0.4
            n.gate.set()

        # A refusal without a hint (a full disk) does not pass by waiting: not retried.
        with pytest.raises(CapacityExceeded, match=re.escape("the blob store is full")):
            await AsyncClient(tmp_path).call("test.full", timeout=5)
        assert n.full_calls == 1


def test_the_wait_honours_the_hint_and_spreads_callers_out() -> None:
    waits = [retry_wait(0, 200) for _ in range(200)]
    assert all(0.2 <= w <= 0.25 for w in waits) and max(waits) - min(waits) > 0.02
    assert all(0.2 <= retry_wait(5, 200) <= 0.2 + 1.6 for _ in range(50))  # the window doubles
    assert all(retry_wait(40, 120_000) <= 10.0 for _ in range(50))  # capped: hint 5 s + window 5 s
