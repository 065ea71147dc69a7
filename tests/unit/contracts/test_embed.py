"""How the RAG service reaches its embedder: the window it chunks for, and answers it refuses.

Real buses joined by authenticated in-memory links; the embed.text providers
are plain handlers, one honest and one a member that advertises or answers
nonsense.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community import Level
from hearthnet.contracts.embed import DEFAULT_WINDOW, Embedder, pack_vectors
from hearthnet.errors import InternalError
from hearthnet.identity import Identity
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.polling import wait_until

MODEL = "all-MiniLM-L6-v2"
COMMUNITY = "hc1:t"


def _bus(identity: Identity) -> CapabilityBus:
    return CapabilityBus(identity, level_of=lambda _n: Level.MEMBER, community_id=lambda: COMMUNITY, name="n")


def _provider(bus: CapabilityBus, window: int, rows: Any = None) -> None:
    """An embed.text of ``MODEL`` advertising ``window``; answers ``rows(n)`` or unit vectors."""

    async def embed(ctx: CallContext) -> dict[str, Any]:
        n = len(ctx.input["texts"])
        vectors = rows(n) if rows is not None else np.eye(n, 384, dtype=np.float32)
        return {"encoding": "f32le", "dim": 384, "count": n, "embeddings": pack_vectors(vectors)}

    params = {"model": MODEL, "dim": 384, "max_tokens": window}
    bus.register(Registration(CapabilityDescriptor("embed.text", (1, 0), params=params), embed))


async def _link_pair(x: CapabilityBus, y: CapabilityBus) -> tuple[Any, Any]:
    """Two ends of one authenticated in-memory link between ``x`` and ``y``."""
    x_end, y_end = memory_stream_pair()
    ends: dict[str, Any] = {}

    async def respond() -> None:
        ends["y"] = await accept_link(
            y_end, identity=y.identity, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
        )

    async with anyio.create_task_group() as hs:
        hs.start_soon(respond)
        ends["x"] = await initiate_link(
            x_end, identity=x.identity, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
        )
    return ends["x"], ends["y"]


@asynccontextmanager
async def _linked(x: CapabilityBus, *others: CapabilityBus) -> AsyncIterator[None]:
    """``x`` joined to each of ``others`` by one authenticated link, manifests exchanged."""
    async with anyio.create_task_group() as tg:
        for y in others:
            x_link, y_link = await _link_pair(x, y)
            tg.start_soon(x.attach, x_link)
            tg.start_soon(y.attach, y_link)
            tg.start_soon(y.run_announcer)
        tg.start_soon(x.run_announcer)
        await wait_until(lambda: all(y.node_id in x.registry.remote_nodes() for y in others))
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_member_advertising_a_tiny_window_does_not_set_the_chunk_size() -> None:
    """Any member's manifest counted: a window of 1 made every ingest in the community fail
    (bad_request "too small"), a window of 10 cut every document into 6-token chunks."""
    rag, honest, hostile = (_bus(Identity.generate()) for _ in range(3))
    _provider(honest, 256)
    _provider(hostile, 1)
    async with _linked(rag, honest, hostile):
        await wait_until(lambda: len(rag.providers("embed.text", (1, 0), {"model": MODEL})) == 2)
        assert Embedder(rag, MODEL, 10.0).max_tokens() == 256
        _provider(rag, 512)  # a provider on this node is the one calls go to first: its window
        assert Embedder(rag, MODEL, 10.0).max_tokens() == 512


@pytest.mark.anyio
async def test_only_nonsense_windows_fall_back_to_the_default() -> None:
    rag, hostile = _bus(Identity.generate()), _bus(Identity.generate())
    _provider(hostile, 3)
    async with _linked(rag, hostile):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        assert Embedder(rag, MODEL, 10.0).max_tokens() == DEFAULT_WINDOW


@pytest.mark.anyio
async def test_vectors_that_are_not_finite_are_refused_as_the_providers_fault() -> None:
    """NaN rows reached the store as the caller's bad_request; a wrong first answer would have
    fixed a new corpus's dimension."""
    rag, hostile = _bus(Identity.generate()), _bus(Identity.generate())
    _provider(hostile, 256, rows=lambda n: np.full((n, 384), np.nan, dtype=np.float32))
    async with _linked(rag, hostile):
        await wait_until(lambda: bool(rag.providers("embed.text", (1, 0), {"model": MODEL})))
        with pytest.raises(InternalError, match="not all finite"):
            await Embedder(rag, MODEL, 10.0).embed(["compost"])
