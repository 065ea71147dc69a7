"""Deadlines from the work (issue 33): a busy embedder slows bulk embedding down, it does not fail
it; a call that overruns is split and retried; only an embedder that is gone fails it.

Real buses joined by authenticated in-memory links (as in ``test_embed.py``); the remote
embed.text providers are plain handlers whose speed the test sets: one that takes time in
proportion to the texts it gets, one that cannot finish calls above a size, one that never
answers (with and without ``node.ping`` beside it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.contracts.embed import Embedder, pack_vectors
from hearthnet.errors import Partition, Timeout
from hearthnet.identity import Identity
from hearthnet.runtime.pace import Pace
from tests.polling import wait_until
from tests.unit.contracts.test_embed import MODEL, _bus, _linked

DIM = 384


def _rows(texts: list[str]) -> np.ndarray:
    """Text ``"t<i>"`` -> the unit vector e_i: the answer says which text each row belongs to."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        out[row, int(text[1:])] = 1.0
    return out


def _provider(bus: CapabilityBus, work: Callable[[list[str]], Any], sizes: list[int]) -> None:
    """An embed.text of ``MODEL`` that records each call's size and awaits ``work(texts)`` first."""

    async def embed(ctx: CallContext) -> dict[str, Any]:
        texts = list(ctx.input["texts"])
        sizes.append(len(texts))
        await work(texts)
        packed = pack_vectors(_rows(texts))
        return {"encoding": "f32le", "dim": DIM, "count": len(texts), "embeddings": packed}

    params = {"model": MODEL, "dim": DIM, "max_tokens": 256}
    bus.register(Registration(CapabilityDescriptor("embed.text", (1, 0), params=params), embed))


def _ping(bus: CapabilityBus) -> None:
    async def ping(ctx: CallContext) -> dict[str, Any]:
        return {"pong": True}

    bus.register(Registration(CapabilityDescriptor("node.ping", (1, 0)), ping))


TEXTS = [f"t{i}" for i in range(32)]


@pytest.mark.anyio
async def test_a_deadline_follows_the_size_of_the_call_not_the_configured_timeout() -> None:
    """The configured ``embed_timeout_seconds`` was the deadline of every call whatever its size: a
    call of 32 texts that takes 0.64 s failed a 0.05 s timeout.  It is now only the floor."""
    rag, slow = _bus(Identity.generate()), _bus(Identity.generate())
    sizes: list[int] = []

    async def busy(texts: list[str]) -> None:
        await anyio.sleep(0.02 * len(texts))  # the provider's work: 20 ms a text

    _provider(slow, busy, sizes)
    async with _linked(rag, slow):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        embedder = Embedder(rag, MODEL, 0.05)
        with anyio.fail_after(60):
            answer = await embedder.embed(TEXTS, bulk=True)
        assert np.array_equal(answer.vectors, _rows(TEXTS))
        assert sizes == [32]
        # The pace it showed is kept per provider: the next deadline is from it, not the guess.
        assert embedder.pace.per_unit([slow.node_id]) < embedder.pace.initial


@pytest.mark.anyio
async def test_a_call_that_overruns_is_split_and_retried_and_says_the_embedder_is_busy() -> None:
    rag, small = _bus(Identity.generate()), _bus(Identity.generate())
    sizes: list[int] = []
    never = anyio.Event()

    async def only_small_calls(texts: list[str]) -> None:
        if len(texts) > 8:
            await never.wait()  # a provider too busy to finish a big call in any sane time

    _provider(small, only_small_calls, sizes)
    async with _linked(rag, small):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        embedder = Embedder(rag, MODEL, 0.2, Pace(per_unit=1e-4, floor=0.2, overhead=0.0))
        told: list[int] = []

        async def busy() -> None:
            told.append(len(sizes))

        with anyio.fail_after(60):
            answer = await embedder.embed_patiently(TEXTS, busy=busy)
    assert np.array_equal(answer.vectors, _rows(TEXTS))  # every row, in the order asked
    assert sizes == [32, 16, 8, 8, 16, 8, 8]
    assert told, "the progress never said the embedder was busy"


@pytest.mark.anyio
async def test_a_busy_embedder_that_still_answers_a_probe_gets_one_text_again() -> None:
    rag, tired = _bus(Identity.generate()), _bus(Identity.generate())
    sizes: list[int] = []
    never = anyio.Event()

    async def slow_start(texts: list[str]) -> None:
        if len(sizes) <= 2:
            await never.wait()  # the first two tries overrun; the third is answered

    _provider(tired, slow_start, sizes)
    _ping(tired)
    async with _linked(rag, tired):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        embedder = Embedder(rag, MODEL, 0.1, Pace(per_unit=1e-4, floor=0.1, overhead=0.0))
        with anyio.fail_after(60):
            answer = await embedder.embed_patiently(["t3"])
    assert np.array_equal(answer.vectors, _rows(["t3"]))
    assert sizes == [1, 1, 1]


@pytest.mark.anyio
async def test_an_embedder_that_is_gone_fails_the_call_saying_so() -> None:
    """No provider answers a probe (``node.ping``): the ingest fails, and the message says the
    embedder is gone (not a bare ``timeout``)."""
    rag, dead = _bus(Identity.generate()), _bus(Identity.generate())
    sizes: list[int] = []
    never = anyio.Event()

    async def hang(texts: list[str]) -> None:
        await never.wait()

    _provider(dead, hang, sizes)  # no node.ping beside it: nothing there answers
    async with _linked(rag, dead):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        embedder = Embedder(rag, MODEL, 0.1, Pace(per_unit=1e-4, floor=0.1, overhead=0.0))
        with anyio.fail_after(60), pytest.raises(Partition, match="the embedder is gone"):
            await embedder.embed_patiently(TEXTS[:2])
        assert sizes == [2, 1]  # split once, then the first text overran and the probe failed
        with anyio.fail_after(60), pytest.raises(Timeout):
            await embedder.embed(TEXTS[:1])  # a plain (query) call just times out
