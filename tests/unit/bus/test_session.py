"""One peer session over an in-memory link, driven from a raw link on the other side."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from hearthnet.bus.session import IncomingCall, PeerSession
from hearthnet.errors import Timeout
from hearthnet.transport import Link
from tests.memory_links import memory_link_pair
from tests.polling import wait_until


async def answer(session: PeerSession, inc: IncomingCall) -> None:
    await session.send_quiet({"t": "done", "id": inc.request.id, "output": {}, "meta": {}})


async def ignore_control(_session: PeerSession, _msg: dict[str, Any]) -> None:
    return None


@asynccontextmanager
async def session_and_raw_link(
    dispatcher: Any = answer,
) -> AsyncIterator[tuple[PeerSession, Link]]:
    """A running ``PeerSession`` and the raw link of its peer."""
    ours, raw = await memory_link_pair()
    session = PeerSession(ours, dispatcher=dispatcher, on_control=ignore_control)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            try:
                yield session, raw
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):  # both ends closed: their memory streams with them
            await ours.aclose()
            await raw.aclose()


def request(rid: int, *, deadline_ms: int = 5000, hang: bool = False) -> dict[str, Any]:
    return {
        "t": "req",
        "id": rid,
        "capability": "test.x",
        "params": {},
        "input": {"hang": hang},
        "deadline_ms": deadline_ms,
    }


@pytest.mark.anyio
async def test_an_unanswered_call_times_out_at_its_give_up_time_and_the_peer_is_told() -> None:
    async with session_and_raw_link() as (session, raw):
        give_up_at = anyio.current_time() + 0.2
        call = await session.request(
            "test.x", "1.0", {}, {}, deadline_ms=150, trace_id="t", stream=False, give_up_at=give_up_at
        )
        with anyio.fail_after(5):
            sent = await raw.receive()
            assert sent["t"] == "req"
            with pytest.raises(Timeout, match=r"test\.x"):
                await call.result.wait()
            assert anyio.current_time() >= give_up_at
            assert await raw.receive() == {"t": "cancel", "id": sent["id"]}
        assert call.id not in session.outgoing


@pytest.mark.anyio
async def test_a_later_call_with_an_earlier_give_up_time_is_not_kept_waiting() -> None:
    async with session_and_raw_link() as (session, raw):
        now = anyio.current_time()
        slow = await session.request(
            "test.x", "1.0", {}, {}, deadline_ms=60_000, trace_id="t", stream=False, give_up_at=now + 60
        )
        fast = await session.request(
            "test.x", "1.0", {}, {}, deadline_ms=100, trace_id="t", stream=False, give_up_at=now + 0.1
        )
        with anyio.fail_after(5), pytest.raises(Timeout):
            await fast.result.wait()
        assert not slow.result.done
        del raw


@pytest.mark.anyio
async def test_answered_calls_do_not_pile_up_in_the_give_up_heap() -> None:
    async with session_and_raw_link() as (session, raw):
        for _ in range(3000):
            call = await session.request(
                "test.x",
                "1.0",
                {},
                {},
                deadline_ms=60_000,
                trace_id="t",
                stream=False,
                give_up_at=anyio.current_time() + 60,
            )
            sent = await raw.receive()
            await raw.send({"t": "done", "id": sent["id"], "output": {"n": sent["id"]}, "meta": {}})
            assert (await call.result.wait()).output == {"n": call.id}
        # pruned once answered calls dominate it
        assert len(session.deadlines.heap) + len(session.deadlines.fresh) <= 1025


@pytest.mark.anyio
async def test_the_give_up_timers_keep_no_answered_call_alive() -> None:
    """An answered call (and the answer it holds) is freed at once, not when its deadline comes up."""
    import gc
    import weakref

    async with session_and_raw_link() as (session, raw):
        gone: list[weakref.ref[Any]] = []
        for _ in range(20):
            call = await session.request(
                "test.x",
                "1.0",
                {},
                {},
                deadline_ms=60_000,
                trace_id="t",
                stream=False,
                give_up_at=anyio.current_time() + 60,
            )
            sent = await raw.receive()
            await raw.send({"t": "done", "id": sent["id"], "output": {"pad": b"x" * 1000}, "meta": {}})
            await call.result.wait()
            gone.append(weakref.ref(call))
            del call
        gc.collect()
        assert [ref for ref in gone if ref() is not None] == []
        assert session.deadlines.heap or session.deadlines.fresh  # the entries are there, holding nothing


@pytest.mark.anyio
async def test_calls_are_served_by_reused_workers_at_most_one_per_call_in_flight() -> None:
    gate = anyio.Event()

    async def gated(session: PeerSession, inc: IncomingCall) -> None:
        await gate.wait()
        await answer(session, inc)

    async with session_and_raw_link(gated) as (session, raw):
        gate.set()
        with anyio.fail_after(5):
            for rid in range(1, 101):  # one after another: one worker serves them all
                await raw.send(request(rid))
                assert (await raw.receive())["id"] == rid
        assert session.workers == 1
        gate = anyio.Event()
        with anyio.fail_after(5):
            for rid in range(101, 133):  # 32 at once: each waits in its own worker
                await raw.send(request(rid))
            await wait_until(lambda: len(session.incoming) == 32)
            gate.set()
            answered = {(await raw.receive())["id"] for _ in range(32)}
        assert answered == set(range(101, 133))
        assert session.workers == 32
        await wait_until(lambda: not session.incoming)


@pytest.mark.anyio
async def test_the_peers_call_is_stopped_at_its_deadline_and_a_reused_id_is_not() -> None:
    gate = anyio.Event()

    async def timed(session: PeerSession, inc: IncomingCall) -> None:
        scope = anyio.CancelScope()
        inc.enforce_deadline(scope, anyio.current_time() + inc.request.deadline_ms / 1000)
        with scope:
            if inc.request.input["hang"]:
                await gate.wait()
        if inc.deadline_passed:
            await session.send_quiet(
                {"t": "error", "id": inc.request.id, "error": "timeout", "message": "late"}
            )
        else:
            await answer(session, inc)

    async with session_and_raw_link(timed) as (session, raw):
        with anyio.fail_after(5):
            await raw.send(request(7, deadline_ms=200))
            assert (await raw.receive())["t"] == "done"
            await raw.send(request(7, hang=True))  # the same id again, once the first is over
            await raw.send(request(8, deadline_ms=300, hang=True))
            late = await raw.receive()
            assert (late["t"], late["id"], late["error"]) == ("error", 8, "timeout")
            # by now the first call 7's deadline (200 ms) has come up too, and was skipped
            assert 7 in session.incoming and not session.incoming[7].deadline_passed
            gate.set()
            done = await raw.receive()
            assert (done["t"], done["id"]) == ("done", 7)


async def tcp_link_pair() -> tuple[Link, Link]:
    """``(ours, peer)``: an authenticated link over real TCP on 127.0.0.1."""
    from hearthnet.identity import Identity
    from hearthnet.transport import accept_link, initiate_link
    from tests.memory_links import COMMUNITY

    alice, bob = Identity.generate(), Identity.generate()
    out: dict[str, Link] = {}
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listeners:
        listener = listeners.listeners[0]
        port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def respond() -> None:
            stream = await listener.accept()
            out["peer"] = await accept_link(
                stream, identity=bob, community_id=COMMUNITY, admit=lambda _p: None, remote_address="t"
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(respond)
            stream = await anyio.connect_tcp("127.0.0.1", port)
            out["ours"] = await initiate_link(
                stream, identity=alice, community_id=COMMUNITY, admit=lambda _p: None, remote_address="t"
            )
    return out["ours"], out["peer"]


@pytest.mark.anyio
@pytest.mark.parametrize("peer_keeps_talking", [False, True])
async def test_a_peer_that_stops_reading_ends_the_session_and_frees_stuck_writers(
    peer_keeps_talking: bool,
) -> None:
    """A write blocked on a full socket cannot be cancelled; closing the link must fail it.

    Silent peer: the liveness check ends the session.  A peer that still sends
    keepalives but never reads: the stalled write itself ends it.
    """
    from hearthnet.bus.liveness import Liveness
    from hearthnet.errors import Partition

    ours, peer = await tcp_link_pair()
    outcomes: list[str] = []

    async def answer_big(session: PeerSession, inc: IncomingCall) -> None:
        """The session's own workers get stuck writing answers the peer never reads."""
        try:
            await session.send({"t": "done", "id": inc.request.id, "output": {"pad": b"x" * 500_000}})
            outcomes.append("written")
        except Partition:
            outcomes.append("partition")

    session = PeerSession(ours, dispatcher=answer_big, on_control=ignore_control, liveness=Liveness(0.2, 0.6))
    calls = 40  # 20 MB of answers: far more than the socket buffers hold

    async def flood() -> None:
        for rid in range(1, calls + 1):
            await peer.send(request(rid))

    async def chatter() -> None:
        while True:
            await peer.send({"t": "keepalive"})
            await anyio.sleep(0.1)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            if peer_keeps_talking:
                tg.start_soon(chatter)
            tg.start_soon(flood)
            await session.run()
            await wait_until(lambda: len(outcomes) == calls)
            tg.cancel_scope.cancel()
    assert "partition" in outcomes and set(outcomes) <= {"written", "partition"}
    assert ours.closed
    if peer_keeps_talking:
        assert "stopped reading" in session.close_reason
    else:  # silent and not reading: whichever check comes first
        assert "stopped reading" in session.close_reason or "silent" in session.close_reason
    await peer.aclose()
