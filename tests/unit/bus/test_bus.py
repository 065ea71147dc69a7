"""The capability bus over real (in-memory) authenticated links: routing, limits, deadlines, streams."""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, params_key_equals
from hearthnet.community.levels import Level
from hearthnet.contracts import routing
from hearthnet.errors import (
    BadRequest,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    SchemaMismatch,
    Timeout,
    Unauthorized,
)
from hearthnet.identity import Identity
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.polling import wait_until

COMMUNITY = "hc1:test"


@dataclass
class Mesh:
    buses: list[CapabilityBus]
    levels: dict[str, Level]


def make_bus(identity: Identity, levels: dict[str, Level], name: str) -> CapabilityBus:
    return CapabilityBus(identity, level_of=levels.get, community_id=lambda: COMMUNITY, name=name)


@asynccontextmanager
async def mesh(n: int, levels_of: list[Level] | None = None) -> AsyncIterator[Mesh]:
    """``n`` buses, every pair linked by an authenticated in-memory link."""
    ids = [Identity.generate() for _ in range(n)]
    levels = {i.node_id: (levels_of[k] if levels_of else Level.TRUSTED) for k, i in enumerate(ids)}
    buses = [make_bus(i, levels, f"n{k}") for k, i in enumerate(ids)]

    def admit(node_id: str) -> None:
        if node_id not in levels:
            raise Unauthorized("not a member")

    async with anyio.create_task_group() as tg:
        for x in range(n):
            for y in range(x + 1, n):
                a_stream, b_stream = memory_stream_pair()
                results: dict[str, Any] = {}

                async def accept(
                    b: CapabilityBus = buses[y], s: Any = b_stream, r: dict[str, Any] = results
                ) -> None:
                    r["b"] = await accept_link(
                        s, identity=b.identity, community_id=COMMUNITY, admit=admit, remote_address="mem"
                    )

                async with anyio.create_task_group() as hs:
                    hs.start_soon(accept)
                    results["a"] = await initiate_link(
                        a_stream,
                        identity=buses[x].identity,
                        community_id=COMMUNITY,
                        admit=admit,
                        remote_address="mem",
                    )
                tg.start_soon(buses[x].attach, results["a"])
                tg.start_soon(buses[y].attach, results["b"])
        for b in buses:
            tg.start_soon(b.run_announcer)
        await wait_until(lambda: all(len(b.registry.remote_nodes()) == n - 1 for b in buses))
        try:
            yield Mesh(buses, levels)
        finally:
            tg.cancel_scope.cancel()


def reg(name: str, handler: Any, **kw: Any) -> Registration:
    predicate = kw.pop("predicate", None)
    d = CapabilityDescriptor(name, kw.pop("version", (1, 0)), **kw)
    return Registration(d, handler, predicate) if predicate else Registration(d, handler)


_ALL: list[CapabilityBus] = []


@pytest.fixture(autouse=True)
def _reset_all() -> None:
    _ALL.clear()


def _advertised(b: CapabilityBus) -> set[str]:
    return {r.descriptor.ref for r in b.registry.local() if not r.descriptor.local_only}


def _seen_by_peers(b: CapabilityBus) -> bool:
    peers = [o for o in _ALL if o is not b]
    return all(
        _advertised(b) <= {d.ref for d in o.registry.remote_nodes()[b.node_id].capabilities} for o in peers
    )


async def announce(*buses: CapabilityBus) -> None:
    """Wait until every peer holds a manifest of each bus listing all it registered."""
    await wait_until(lambda: all(_seen_by_peers(b) for b in buses))


async def echo(ctx: CallContext) -> dict[str, Any]:
    return {"echo": ctx.input.get("x"), "caller": ctx.caller, "level": ctx.caller_level.label}


@pytest.mark.anyio
async def test_remote_call_round_trip_and_caller_identity() -> None:
    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.echo", echo))
        await announce(b)
        result = await a.call("test.echo", input={"x": 41})
        assert result.output == {"echo": 41, "caller": a.node_id, "level": "trusted"}
        assert result.provider == b.node_id
        assert "ms" in result.meta


@pytest.mark.anyio
async def test_local_provider_is_preferred() -> None:
    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        a.register(reg("test.echo", echo))
        b.register(reg("test.echo", echo))
        await announce(a, b)
        assert (await a.call("test.echo")).provider == a.node_id


@pytest.mark.anyio
async def test_version_rule_and_schema_mismatch() -> None:
    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.echo", echo, version=(1, 3)))
        await announce(b)
        assert (await a.call("test.echo", (1, 2))).provider == b.node_id
        with pytest.raises(NotFound):
            await a.call("test.echo", (1, 4))
        with pytest.raises(NotFound):
            await a.call("test.echo", (2, 0))
        with pytest.raises(SchemaMismatch):
            await _raw_call(a, b, "1.4")


async def _raw_call(a: CapabilityBus, b: CapabilityBus, version: str) -> None:
    """Send a request for a version the provider lacks, bypassing the caller's own registry check."""
    session = a.sessions[b.node_id]
    call = await session.request("test.echo", version, {}, {}, deadline_ms=2000, trace_id="t", stream=False)
    await call.result.wait()


@pytest.mark.anyio
async def test_params_predicate_routes_to_matching_provider() -> None:
    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(
            reg("test.corpus", echo, params={"corpus": "alpha"}, predicate=params_key_equals("corpus"))
        )
        c.register(reg("test.corpus", echo, params={"corpus": "beta"}, predicate=params_key_equals("corpus")))
        await announce(b, c)
        assert (await a.call("test.corpus", params={"corpus": "beta"})).provider == c.node_id
        assert (await a.call("test.corpus", params={"corpus": "alpha"})).provider == b.node_id
        with pytest.raises(NotFound):
            await a.call("test.corpus", params={"corpus": "gamma"})


@pytest.mark.anyio
async def test_two_hosts_of_one_corpus_send_callers_to_the_one_with_more_chunks() -> None:
    """Row 3 of the hardening issue: a second, smaller copy of a corpus name must not win by being
    local or faster; its chunks advertised in the params rank it (the params predicate ignores them).
    The bus knows no capability: the preference is the rag contract's, given to the bus at start."""
    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        for bus in m.buses:  # as the node does at start: the rag family's preference
            routing.install(bus)
        by_corpus = params_key_equals("corpus")
        a.register(reg("rag.query", echo, params={"corpus": "family", "chunks": 1}, predicate=by_corpus))
        b.register(reg("rag.query", echo, params={"corpus": "family", "chunks": 3086}, predicate=by_corpus))
        await announce(a, b)
        for _ in range(3):  # from the small host itself (local) and from a third node, every time
            assert (await a.call("rag.query", params={"corpus": "family"})).provider == b.node_id
            assert (await c.call("rag.query", params={"corpus": "family"})).provider == b.node_id
        # the preference only ranks: the smaller copy still answers when the bigger host is gone
        b.unregister("rag.query", {"corpus": "family", "chunks": 3086})
        await wait_until(lambda: len(c.providers("rag.query", params={"corpus": "family"})) == 1)
        assert (await c.call("rag.query", params={"corpus": "family"})).provider == a.node_id


@pytest.mark.anyio
async def test_routing_follows_every_change_of_providers_and_rules_between_calls() -> None:
    """Lookups repeated on every call are remembered only while nothing they depend on changed."""
    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        by_corpus = params_key_equals("corpus")
        b.register(reg("test.q", echo, params={"corpus": "family"}, predicate=by_corpus))
        await announce(b)
        family = {"corpus": "family"}
        for _ in range(2):
            assert (await a.call("test.q", params=family)).provider == b.node_id
        a.register(reg("test.q", echo, params={"corpus": "family"}, predicate=by_corpus))
        assert (await a.call("test.q", params=family)).provider == a.node_id  # local now preferred
        a.unregister("test.q", family)
        assert (await a.call("test.q", params=family)).provider == b.node_id
        with pytest.raises(NotFound):  # another value of the same key is looked up afresh
            await a.call("test.q", params={"corpus": "work"})
        b.register(reg("test.q", echo, params={"corpus": "work"}, predicate=by_corpus))
        await wait_until(lambda: len(a.providers("test.q", params={"corpus": "work"})) == 1)
        assert (await a.call("test.q", params={"corpus": "work"})).provider == b.node_id
        a.keep_local("test.q", family)
        with pytest.raises(NotFound, match="only served by this node"):
            await a.call("test.q", params=family)
        b.unregister("test.q", {"corpus": "work"})
        await wait_until(lambda: not a.providers("test.q", params={"corpus": "work"}))
        with pytest.raises(NotFound):
            await a.call("test.q", params={"corpus": "work"})
        # params that are not all text are looked up every time: 1 and True are equal in Python
        b.register(reg("test.n", echo, params={"n": 1}, predicate=lambda o, r: type(r["n"]) is type(o["n"])))
        await wait_until(lambda: len(a.providers("test.n", params={"n": 1})) == 1)
        assert (await a.call("test.n", params={"n": 1})).provider == b.node_id
        with pytest.raises(NotFound):
            await a.call("test.n", params={"n": True})


@pytest.mark.anyio
async def test_trust_level_enforced_for_remote_callers() -> None:
    async with mesh(2, [Level.MEMBER, Level.ANCHOR]) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.secret", echo, trust_required=Level.TRUSTED))
        await announce(b)
        with pytest.raises(Unauthorized, match="trusted") as refused:
            await a.call("test.secret")
        # the refusal says how to get there, as the CLI's own checks do
        assert f"'hearthnet member promote {a.node_id} --level trusted'" in refused.value.message
        m.levels[a.node_id] = Level.TRUSTED  # promotion takes effect on the next call
        assert (await a.call("test.secret")).provider == b.node_id


@pytest.mark.anyio
async def test_local_only_capability_is_not_advertised_or_served_remotely() -> None:
    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.private", echo, local_only=True))
        b.register(reg("test.echo", echo))
        await announce(b)
        assert [d.name for d in a.registry.remote_nodes()[b.node_id].capabilities] == ["test.echo"]
        with pytest.raises(NotFound):
            await _raw_private(a, b)
        assert (await b.call("test.private")).provider == b.node_id


@pytest.mark.anyio
async def test_what_is_served_local_only_never_goes_to_a_peer_claiming_the_same() -> None:
    """A peer advertising our personal corpus must not get our queries, even when ours is busy."""
    release = anyio.Event()
    seen_by_peer: list[Any] = []

    async def busy(ctx: CallContext) -> dict[str, Any]:
        await release.wait()
        return {"from": "ours"}

    async def impostor(ctx: CallContext) -> dict[str, Any]:
        seen_by_peer.append(ctx.input)
        return {"from": "peer"}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        params = {"corpus": "personal"}
        a.register(reg("test.q", busy, params=params, local_only=True, idempotent=True, max_concurrent=1))
        b.register(
            reg("test.q", impostor, params=params, idempotent=True, predicate=params_key_equals("corpus"))
        )
        await announce(b)
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.call, "test.q", (1, 0))
            await wait_until(lambda: a.stats.get("test.q@1.0").in_flight == 1)
            with pytest.raises(CapacityExceeded):  # saturated: refused, not routed to the peer
                await a.call("test.q", params=params, input={"query": "my medical results"})
            release.set()
        assert seen_by_peer == []


@pytest.mark.anyio
async def test_calls_kept_local_never_reach_a_peer_even_without_a_local_provider() -> None:
    """Before this node has a personal corpus, a peer advertising one still gets no query."""
    seen_by_peer: list[Any] = []

    async def impostor(ctx: CallContext) -> dict[str, Any]:
        seen_by_peer.append(ctx.input)
        return {"from": "peer"}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        a.keep_local("test.q", {"corpus": "personal"})
        b.register(
            reg("test.q", impostor, params={"corpus": "personal"}, predicate=params_key_equals("corpus"))
        )
        b.register(
            reg("test.q", impostor, params={"corpus": "family"}, predicate=params_key_equals("corpus"))
        )
        await announce(b)
        with pytest.raises(NotFound, match="only served by this node"):
            await a.call("test.q", params={"corpus": "personal"}, input={"query": "my medical results"})
        with pytest.raises(NotFound):
            await a.call("test.q", params={"corpus": "personal"}, provider=b.node_id)
        assert seen_by_peer == []
        assert (await a.call("test.q", params={"corpus": "family"})).output == {"from": "peer"}


@pytest.mark.anyio
async def test_unknown_capability_names_do_not_grow_stats_and_deadlines_are_capped() -> None:
    held = anyio.Event()

    async def hold(ctx: CallContext) -> dict[str, Any]:
        held.set()
        await anyio.sleep_forever()
        raise AssertionError

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.hold", hold, timeout_seconds=0.5))
        await announce(b)
        session = a.sessions[b.node_id]
        for n in range(50):
            call = await session.request(
                f"no.such{n}" + "x" * 1000, "1.0", {}, {}, deadline_ms=2000, trace_id="t", stream=False
            )
            with pytest.raises(NotFound):
                await call.result.wait()
        call = await session.request("test.echo", "1.²", {}, {}, deadline_ms=2000, trace_id="t", stream=False)
        with pytest.raises(BadRequest, match=r"X\.Y"):
            await call.result.wait()
        refs = set(b.stats.snapshot())
        assert not any(r.startswith("no.such") for r in refs)
        assert b.stats.snapshot()["(unresolved)"]["calls"] == 51
        # the caller asks for an hour; the provider stops the call at its own 0.5 s
        with anyio.fail_after(5):
            call = await session.request(
                "test.hold", "1.0", {}, {}, deadline_ms=3_600_000, trace_id="t", stream=False
            )
            with pytest.raises(Timeout):
                await call.result.wait()
        assert held.is_set()


@pytest.mark.parametrize(
    "change",
    [
        {"timeout_seconds": float("inf")},
        {"timeout_seconds": float("nan")},
        {"max_concurrent": float("inf")},
        {"idempotent": "false"},  # bool("false") is True: a peer must send a real bool
        {"streaming": 1},
    ],
)
def test_descriptors_from_peers_with_absurd_numbers_are_bad_requests(change: dict[str, Any]) -> None:
    from hearthnet.bus.descriptors import CapabilityDescriptor

    wire = {**CapabilityDescriptor("test.x").to_wire(), **change}
    with pytest.raises(BadRequest):
        CapabilityDescriptor.from_wire(wire)


async def _raw_private(a: CapabilityBus, b: CapabilityBus) -> None:
    call = await a.sessions[b.node_id].request(
        "test.private", "1.0", {}, {}, deadline_ms=2000, trace_id="t", stream=False
    )
    await call.result.wait()


@pytest.mark.anyio
async def test_errors_cross_the_wire_as_their_class() -> None:
    async def fails(ctx: CallContext) -> dict[str, Any]:
        raise BadRequest("k must be at most 20")

    async def crashes(ctx: CallContext) -> dict[str, Any]:
        raise RuntimeError("secret internals")

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.fails", fails))
        b.register(reg("test.crashes", crashes))
        await announce(b)
        with pytest.raises(BadRequest, match="at most 20"):
            await a.call("test.fails")
        with pytest.raises(Exception) as info:
            await a.call("test.crashes")
        assert info.value.code == "internal_error"  # type: ignore[attr-defined]
        assert "secret internals" not in str(info.value) and "trace_id" in str(info.value)


@pytest.mark.anyio
async def test_an_answer_too_large_for_a_frame_is_a_prompt_bad_request_not_a_timeout() -> None:
    async def huge(ctx: CallContext) -> dict[str, Any]:
        return {"blob": b"x" * (2 << 20)}  # twice the default 1 MiB frame

    async def long_message(ctx: CallContext) -> dict[str, Any]:
        raise NotFound("no such corpus: " + "y" * (2 << 20))

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.huge", huge))
        b.register(reg("test.long_message", long_message))
        b.register(reg("test.echo", echo))
        await announce(b)
        with anyio.fail_after(5):  # the call's own deadline is 30 s: the answer must come now
            with pytest.raises(BadRequest, match="cannot carry"):
                await a.call("test.huge", timeout=30)
            with pytest.raises(NotFound, match="no such corpus") as info:
                await a.call("test.long_message", timeout=30)
        assert len(info.value.message) < 5000
        assert (await a.call("test.echo", input={"x": 1})).output["echo"] == 1  # the link still works


@pytest.mark.anyio
async def test_an_answer_the_caller_could_not_decode_fails_that_call_and_not_the_link() -> None:
    """The caller's decoder refuses non-string map keys (and anything over the wire limits): sent
    as it is, such an answer made it close the link and fail every call on it."""

    async def int_keys(ctx: CallContext) -> dict[str, Any]:
        return {"counts": {1: 5}}

    async def bad_frame(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"by_page": {2: "x"}})
        return {}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.intkeys", int_keys))
        b.register(reg("test.badframe", bad_frame, streaming=True))
        b.register(reg("test.echo", echo))
        await announce(b)
        link = a.sessions[b.node_id].link
        with pytest.raises(InternalError, match="cannot cross the wire"):
            await a.call("test.intkeys")
        with pytest.raises(InternalError):
            async with a.stream("test.badframe") as call:
                async for _ in call.frames():
                    pass
                await call.result()
        assert (await a.call("test.echo", input={"x": 1})).output["echo"] == 1
        assert a.sessions[b.node_id].link is link and not link.closed  # the same link, still up


@pytest.mark.anyio
async def test_over_max_concurrent_answers_capacity_exceeded_with_retry_hint() -> None:
    release = anyio.Event()

    async def slow(ctx: CallContext) -> dict[str, Any]:
        await release.wait()
        return {}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.slow", slow, max_concurrent=2))
        await announce(b)
        errors: list[BaseException] = []
        done: list[str] = []

        async def one() -> None:
            try:
                done.append((await a.call("test.slow", timeout=5)).provider)
            except CapacityExceeded as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
            await wait_until(lambda: len(errors) == 3)
            release.set()
        assert len(done) == 2
        assert all(isinstance(e, CapacityExceeded) and e.retry_after_ms for e in errors)
        assert b.stats.snapshot()["test.slow@1.0"]["errors_by_code"] == {"capacity_exceeded": 3}


@pytest.mark.anyio
async def test_a_caller_refused_for_capacity_gets_the_next_free_slot_before_one_calling_again() -> None:
    gates: dict[int, anyio.Event] = {}
    running: list[tuple[str, str]] = []

    async def slow(ctx: CallContext) -> dict[str, Any]:
        me = (ctx.capability, ctx.caller)
        running.append(me)
        try:
            await gates.setdefault(int(ctx.input["n"]), anyio.Event()).wait()
        finally:
            running.remove(me)
        return {}

    def release(*ns: int) -> None:
        for n in ns:
            gates.setdefault(n, anyio.Event()).set()

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.slow", slow, max_concurrent=4))
        b.register(reg("test.one", slow, max_concurrent=1))
        await announce(b)
        finished: list[int] = []

        async def call(caller: CapabilityBus, name: str, n: int) -> None:
            await caller.call(name, input={"n": n}, timeout=10)
            finished.append(n)

        async with anyio.create_task_group() as tg:
            # four slots: alone, a may use every one
            for n in range(4):
                tg.start_soon(call, a, "test.slow", n)
            await wait_until(lambda: running.count(("test.slow", a.node_id)) == 4)
            with pytest.raises(CapacityExceeded, match="at its limit of 4"):
                await c.call("test.slow", input={"n": 90}, timeout=5)  # c now waits for a slot
            release(0)
            await wait_until(lambda: 0 in finished)
            with pytest.raises(CapacityExceeded, match="runs 3 of its fair share of 2") as refused:
                await a.call("test.slow", input={"n": 91}, timeout=5)  # the freed slot is c's
            assert refused.value.retry_after_ms
            tg.start_soon(call, c, "test.slow", 10)
            await wait_until(lambda: running.count(("test.slow", c.node_id)) == 1)
            release(1, 2, 3, 10)

            # one slot: a calls again the moment its call ends, c retries later, and gets it
            tg.start_soon(call, a, "test.one", 20)
            await wait_until(lambda: ("test.one", a.node_id) in running)
            with pytest.raises(CapacityExceeded, match="at its limit of 1"):
                await c.call("test.one", input={"n": 92}, timeout=5)
            release(20)
            await wait_until(lambda: 20 in finished)
            with pytest.raises(CapacityExceeded, match="kept for callers refused earlier"):
                await a.call("test.one", input={"n": 93}, timeout=5)
            tg.start_soon(call, c, "test.one", 21)
            await wait_until(lambda: ("test.one", c.node_id) in running)
            release(21)
        assert sorted(finished) == [0, 1, 2, 3, 10, 20, 21]
        stats = b.stats.snapshot()
        assert stats["test.slow@1.0"]["errors_by_code"] == {"capacity_exceeded": 2}
        assert stats["test.one@1.0"]["errors_by_code"] == {"capacity_exceeded": 2}
        assert stats["test.slow@1.0"]["in_flight"] == stats["test.one@1.0"]["in_flight"] == 0


@pytest.mark.anyio
async def test_deadline_travels_and_yields_timeout() -> None:
    started = anyio.Event()
    cancelled = anyio.Event()

    async def hangs(ctx: CallContext) -> dict[str, Any]:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return {}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.hangs", hangs))
        await announce(b)
        t0 = anyio.current_time()
        with pytest.raises(Timeout):
            await a.call("test.hangs", timeout=0.3)
        assert anyio.current_time() - t0 < 1.0
        with anyio.fail_after(2):
            await cancelled.wait()  # the provider stopped working on it too


@pytest.mark.anyio
async def test_a_handler_cut_short_leaves_its_worker_serving_the_next_calls_whole() -> None:
    """A peer's calls share their worker's cancel scope until one is cut short (deadline or
    cancel): the cut call is answered (timeout) or not (cancelled), counted, and the calls
    after it on the same worker run uncancelled, through their own awaits."""
    cut: list[str] = []

    async def gate(ctx: CallContext) -> dict[str, Any]:
        if ctx.input.get("hang"):
            try:
                await anyio.sleep_forever()
            finally:
                cut.append("cut")
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # a scope left cancelled would stop us here
        return {"n": ctx.input.get("n")}

    async def swallow(ctx: CallContext) -> dict[str, Any]:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return {"late": True}  # a handler that ignores its cancellation (a bug)
        raise AssertionError

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.gate", gate))
        b.register(reg("test.swallow", swallow, timeout_seconds=0.2))
        await announce(b)
        with anyio.fail_after(10):
            with pytest.raises(Timeout):
                await a.call("test.gate", input={"hang": True}, timeout=0.2)
            assert [(await a.call("test.gate", input={"n": n})).output["n"] for n in range(20)] == list(
                range(20)
            )
            with anyio.move_on_after(0.1):  # the caller gives up: the provider is told to cancel
                await a.call("test.gate", input={"hang": True}, timeout=30)
            await wait_until(lambda: len(cut) == 2)
            assert (await a.call("test.gate", input={"n": 7})).output == {"n": 7}
            assert (await a.call("test.swallow")).output == {"late": True}
            assert (await a.call("test.gate", input={"n": 8})).output == {"n": 8}
        stats = b.stats.snapshot()["test.gate@1.0"]
        await wait_until(lambda: b.stats.snapshot()["test.gate@1.0"]["calls"] == 24)
        stats = b.stats.snapshot()["test.gate@1.0"]
        assert stats["errors_by_code"] == {"timeout": 1, "cancelled": 1}
        assert stats["in_flight"] == 0
        assert b.sessions[a.node_id].workers <= 2


@pytest.mark.anyio
async def test_idempotent_call_retries_on_next_provider_after_partition() -> None:
    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.echo", echo, idempotent=True))
        c.register(reg("test.echo", echo, idempotent=True))
        await announce(b, c)
        first = (await a.call("test.echo")).provider
        # The first choice's link breaks while the registry still lists it.
        await a.sessions[first].link.aclose()
        result = await a.call("test.echo")
        assert result.provider != first


@pytest.mark.anyio
async def test_a_call_that_failed_on_a_provider_not_declaring_it_idempotent_is_not_retried() -> None:
    ran: list[str] = []

    async def once_only(ctx: CallContext) -> dict[str, Any]:
        ran.append("once-only")
        raise InternalError("failed after doing part of the work")

    async def safe(ctx: CallContext) -> dict[str, Any]:
        ran.append("safe")
        return {}

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.op", once_only))  # not idempotent
        c.register(reg("test.op", safe, idempotent=True))
        await announce(b, c)
        for _ in range(4):
            ran.clear()
            try:
                await a.call("test.op")
            except InternalError:
                assert ran == ["once-only"]  # ... and not tried again on c
            else:
                assert ran == ["safe"]


@pytest.mark.anyio
async def test_repeated_failures_quarantine_a_provider() -> None:
    async def broken(ctx: CallContext) -> dict[str, Any]:
        raise RuntimeError("always")

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.q", broken, idempotent=True))
        await announce(b)
        for _ in range(3):
            with pytest.raises(Exception, match="internal error"):
                await a.call("test.q")
        assert a.router.is_quarantined(b.node_id, "test.q", anyio.current_time())
        c.register(reg("test.q", echo, idempotent=True))
        await announce(c)
        order = [p.node_id for p in a._candidates("test.q", (1, 0), {}, None, now=anyio.current_time())]
        assert order == [c.node_id]  # the quarantined provider is skipped while another exists
        assert (await a.call("test.q")).provider == c.node_id


@pytest.mark.anyio
async def test_an_idempotent_call_moves_on_from_a_silent_provider_and_the_next_call_skips_it() -> None:
    """A provider that takes the call and says nothing (a frozen process: its link still looks
    up) gets the next provider tried beside it once half the deadline has passed; it is then
    quarantined, so the next call does not wait on it at all."""
    silent: list[str] = []
    cancelled = anyio.Event()

    async def first_one_hangs(ctx: CallContext) -> dict[str, Any]:
        if not silent:
            silent.append(ctx.capability)  # whichever provider is asked first goes silent
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()
        return {"x": ctx.input.get("x")}

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.idem", first_one_hangs, idempotent=True))
        c.register(reg("test.idem", first_one_hangs, idempotent=True))
        await announce(b, c)
        first = a._candidates("test.idem", (1, 0), {}, None, now=anyio.current_time())[0].node_id
        t0 = anyio.current_time()
        result = await a.call("test.idem", input={"x": 1}, timeout=2.0)
        took = anyio.current_time() - t0
        assert result.provider != first and result.output == {"x": 1}
        assert 0.9 <= took < 1.9, took  # hedged at half the deadline, answered well inside it
        assert a.router.is_quarantined(first, "test.idem", anyio.current_time())
        with anyio.fail_after(2):
            await cancelled.wait()  # the overtaken attempt was cancelled on the silent provider
        t0 = anyio.current_time()
        again = await a.call("test.idem", input={"x": 2}, timeout=2.0)
        assert again.provider == result.provider and anyio.current_time() - t0 < 0.5


@pytest.mark.anyio
async def test_a_provider_that_says_nothing_by_the_deadline_is_quarantined() -> None:
    """Not even a ``timeout`` answer (a peer's own deadline answers that): the peer's process
    stopped.  Alone, it is still tried (nothing else is left); beside another, it is skipped."""

    async def frozen(session: Any, inc: Any) -> None:
        await anyio.sleep_forever()  # takes the call, never serves or answers it

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.froze", echo, idempotent=True))
        await announce(b)
        b.sessions[a.node_id]._dispatcher = frozen  # as a stopped process would: nothing comes back
        with pytest.raises(Timeout):
            await a.call("test.froze", timeout=0.3)
        assert a.router.is_quarantined(b.node_id, "test.froze", anyio.current_time())
        c.register(reg("test.froze", echo, idempotent=True))
        await announce(c)
        assert (await a.call("test.froze", input={"x": 3}, timeout=2)).provider == c.node_id


@pytest.mark.anyio
async def test_a_call_not_declared_idempotent_is_never_run_twice_by_hedging() -> None:
    ran: list[str] = []

    async def slow_once(ctx: CallContext) -> dict[str, Any]:
        ran.append(ctx.capability)
        await anyio.sleep(0.6)
        return {}

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.once", slow_once))
        c.register(reg("test.once", slow_once))
        await announce(b, c)
        await a.call("test.once", timeout=1.0)  # past half its deadline, and still not hedged
        assert len(ran) == 1


@pytest.mark.anyio
async def test_a_slow_provider_still_answers_when_the_hedge_is_slower() -> None:
    """The hedge runs beside the first attempt, never instead of it: a provider that is merely
    slow keeps its whole deadline, and its answer wins if it comes first."""
    order: list[str] = []

    async def slow(ctx: CallContext) -> dict[str, Any]:
        order.append("started")
        await anyio.sleep(0.7 if len(order) == 1 else 5)
        return {"n": len(order)}

    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.slow2", slow, idempotent=True))
        c.register(reg("test.slow2", slow, idempotent=True))
        await announce(b, c)
        first = a._candidates("test.slow2", (1, 0), {}, None, now=anyio.current_time())[0].node_id
        result = await a.call("test.slow2", timeout=1.0)
        assert result.provider == first and order == ["started", "started"]  # hedged at 0.5 s
        assert not a.router.is_quarantined(first, "test.slow2", anyio.current_time())


@pytest.mark.anyio
async def test_stream_frames_in_order_with_backpressure_and_input() -> None:
    produced: list[int] = []

    async def counter(ctx: CallContext) -> dict[str, Any]:
        for i in range(100):
            produced.append(i)
            await ctx.send({"i": i})
        total = 0
        while (frame := await ctx.receive()) is not None:
            total += frame["n"]
        return {"sum": total}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.count", counter, streaming=True))
        await announce(b)
        async with a.stream("test.count", timeout=10) as call:
            frames = call.frames()
            first = await frames.__anext__()
            assert first == {"i": 0}
            # The producer is held back by the flow-control window, not run to completion.
            await anyio.sleep(0.05)
            assert len(produced) <= 40
            seen = [first["i"]] + [(await frames.__anext__())["i"] for _ in range(99)]
            assert seen == list(range(100))
            for n in range(1, 51):
                await call.send({"n": n})
            await call.end_input()
            assert (await call.result()).output == {"sum": 1275}


@pytest.mark.anyio
async def test_link_loss_fails_pending_calls_with_partition() -> None:
    started = anyio.Event()

    async def hangs(ctx: CallContext) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        return {}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.hangs", hangs))
        await announce(b)
        async with anyio.create_task_group() as tg:
            outcome: list[BaseException] = []

            async def call() -> None:
                try:
                    await a.call("test.hangs", timeout=10, provider=b.node_id)
                except Partition as exc:
                    outcome.append(exc)

            tg.start_soon(call)
            await started.wait()
            await b.sessions[a.node_id].link.aclose()
        assert len(outcome) == 1
        assert b.node_id not in a.registry.remote_nodes()


def test_manifests_valid_for_years_or_with_infinite_numbers_are_refused() -> None:
    from hearthnet.bus.manifest import sign_manifest, verify_manifest
    from hearthnet.wire.codec import pack, unpack_map

    peer = Identity.generate()
    now = 1_800_000_000_000

    def check(wire: dict[str, Any]) -> None:
        verify_manifest(wire, peer_id=peer.node_id, community_id=COMMUNITY, now_ms=now)

    ok = sign_manifest(
        peer, community_id=COMMUNITY, seq=1, now_ms=now, name="p", addresses=[], capabilities=[]
    )
    check(ok)
    years = sign_manifest(
        peer,
        community_id=COMMUNITY,
        seq=1,
        now_ms=now,
        name="p",
        addresses=[],
        capabilities=[],
        ttl_ms=31 * 365 * 86_400_000,
    )
    with pytest.raises(BadRequest, match="lifetime"):
        check(years)
    body = unpack_map(ok["body"])
    body["seq"] = float("inf")
    raw = pack(body)
    with pytest.raises(BadRequest):
        check({"body": raw, "sig": peer.sign(raw)})


@pytest.mark.anyio
async def test_a_streamed_upload_ends_at_its_deadline_when_the_handler_never_reads() -> None:
    """Remote: no input credit and no answer; local: the handler returns without reading."""

    async def never_reads(ctx: CallContext) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    async def reads_nothing(ctx: CallContext) -> dict[str, Any]:
        return {"ignored": True}

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        b.register(reg("test.up", never_reads, streaming=True, timeout_seconds=0.5))
        a.register(reg("test.local_up", reads_nothing, streaming=True, local_only=True))
        await announce(b)
        sent = 0
        with anyio.fail_after(5):
            with pytest.raises(Timeout):
                async with a.stream("test.up", timeout=0.5) as call:
                    for i in range(1000):  # far beyond the 16-frame credit window
                        await call.send({"chunk": i})
                        sent += 1
                    await call.end_input()
                    await call.result()
        assert 16 <= sent < 1000
        with anyio.fail_after(5):
            async with a.stream("test.local_up", timeout=2) as call:
                for i in range(1000):
                    await call.send({"chunk": i})
                await call.end_input()
                assert (await call.result()).output == {"ignored": True}


def _unclosed_streams(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "MemoryObject" in str(w.message)]


@pytest.mark.anyio
async def test_streamed_calls_close_every_memory_stream_they_open() -> None:
    """Local and remote streamed calls, ended normally, early, or by an error, leave no unclosed
    memory object stream behind (each would warn ``Unclosed <MemoryObject...>`` when collected)."""

    async def count(ctx: CallContext) -> dict[str, Any]:
        for i in range(3):
            await ctx.send({"i": i})
        n = 0
        while await ctx.receive() is not None:
            n += 1
        return {"n": n}

    async def fails(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"i": 0})
        raise BadRequest("no")

    async with mesh(2) as m:
        _ALL.extend(m.buses)
        a, b = m.buses
        for bus in (a, b):
            bus.register(reg("test.count", count, streaming=True))
            bus.register(reg("test.fails", fails, streaming=True))
        await announce(b)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            for provider in (a.node_id, b.node_id):
                async with a.stream("test.count", timeout=5, provider=provider) as call:
                    await call.send({})
                    await call.end_input()
                    assert [f["i"] async for f in call.frames()] == [0, 1, 2]
                    assert (await call.result()).output == {"n": 1}
                async with a.stream("test.count", timeout=5, provider=provider) as call:
                    pass  # left before reading anything
                with pytest.raises(BadRequest):
                    async with a.stream("test.fails", timeout=5, provider=provider) as call:
                        await call.result()
            del call
            gc.collect()
        assert _unclosed_streams(caught) == []


@pytest.mark.anyio
async def test_a_provider_whose_link_went_silent_is_tried_last_before_its_link_is_given_up() -> None:
    """A peer whose lid closed sends nothing, not even keepalives; until its link is closed as
    dead, calls go first to a provider that is still heard from."""
    async with mesh(3) as m:
        _ALL.extend(m.buses)
        a, b, c = m.buses
        b.register(reg("test.idem", echo, idempotent=True))
        c.register(reg("test.idem", echo, idempotent=True))
        await announce(b, c)
        first = a._candidates("test.idem", (1, 0), {}, None, now=anyio.current_time())[0].node_id
        other = c.node_id if first == b.node_id else b.node_id
        # Heard from last 2.5 keepalive periods ago: silent, not yet dead (dead_after is 10/3 of it).
        a.sessions[first].link.last_received = time.monotonic() - 2.5 * a.liveness.keepalive_seconds
        order = [p.node_id for p in a._candidates("test.idem", (1, 0), {}, None, now=anyio.current_time())]
        assert order == [other, first]
        assert (await a.call("test.idem", input={"x": 1}, timeout=5)).provider == other
        assert first in a.sessions  # still linked: only the choice of provider changed
