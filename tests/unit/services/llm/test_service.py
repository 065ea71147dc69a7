"""``llm.chat`` through real buses (local calls, and a peer over an authenticated in-memory link)
against a real HTTP/SSE server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.community.levels import Level
from hearthnet.contracts import routing
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound, Timeout, Unauthorized
from hearthnet.identity import Identity
from hearthnet.services.llm import LlmConfig, LlmService, OpenAIChatConfig
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.openai_chat_server import OpenAIChatServer, default_reply, words_of
from tests.polling import wait_until

COMMUNITY = "hc1:test"
MODEL = "test-chat"
MESSAGES = [
    {"role": "system", "content": "Answer from the context. [heating#c12] The boiler is serviced in autumn."},
    {"role": "user", "content": "When is the boiler serviced?"},
]
PROMPT_WORDS = len(" ".join(m["content"] for m in MESSAGES).split())
"""The test server counts a prompt's words as its tokens."""


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@asynccontextmanager
async def llm_node(
    server: OpenAIChatServer, *, peer: bool = False, **config: Any
) -> AsyncIterator[tuple[CapabilityBus, CapabilityBus]]:
    """A bus serving ``llm.chat`` for ``MODEL``, and the bus that calls it (itself, or a linked peer)."""
    ids = [Identity.generate(), Identity.generate()]
    levels = {i.node_id: Level.MEMBER for i in ids}
    buses = [CapabilityBus(i, level_of=levels.get, community_id=lambda: COMMUNITY) for i in ids]
    for bus in buses:  # the capability families' params rules, as a node gives them
        routing.install(bus)
    service = LlmService(LlmConfig(openai=(OpenAIChatConfig(base_url=server.url, model=MODEL, **config),)))
    await service.start()
    for registration in service.registrations():
        buses[0].register(registration)

    def admit(node_id: str) -> None:
        if node_id not in levels:
            raise Unauthorized("not a member")

    try:
        async with anyio.create_task_group() as tg:
            if peer:
                a_stream, b_stream = memory_stream_pair()
                links: dict[str, Any] = {}

                async def accept() -> None:
                    links["b"] = await accept_link(
                        b_stream, identity=ids[1], community_id=COMMUNITY, admit=admit, remote_address="mem"
                    )

                async with anyio.create_task_group() as hs:
                    hs.start_soon(accept)
                    links["a"] = await initiate_link(
                        a_stream, identity=ids[0], community_id=COMMUNITY, admit=admit, remote_address="mem"
                    )
                tg.start_soon(buses[0].attach, links["a"])
                tg.start_soon(buses[1].attach, links["b"])
                await wait_until(lambda: bool(buses[1].providers("llm.chat")))
            try:
                yield buses[0], (buses[1] if peer else buses[0])
            finally:
                tg.cancel_scope.cancel()
    finally:
        await service.stop()


async def stream_chat(
    caller: CapabilityBus, input: dict[str, Any], *, timeout: float = 10, params: dict[str, Any] | None = None
) -> tuple[list[str], Any]:
    deltas: list[str] = []
    wanted = params or {"model": MODEL}
    async with caller.stream("llm.chat", params=wanted, input=input, timeout=timeout) as call:
        await call.end_input()
        async for frame in call.frames():
            deltas.append(frame["delta"])
        return deltas, await call.result()


@pytest.mark.anyio
@pytest.mark.parametrize("peer", [False, True], ids=["local", "peer"])
async def test_deltas_stream_then_the_answer_with_usage_and_timings(
    server: OpenAIChatServer, peer: bool
) -> None:
    async with llm_node(server, peer=peer) as (_, caller):
        deltas, result = await stream_chat(caller, {"messages": MESSAGES, "max_tokens": 32})
    expected = default_reply("[heating#c12]")
    assert deltas == words_of(expected)
    assert result.output == {
        "message": {"role": "assistant", "content": expected},
        "finish_reason": "stop",
        "usage": {"prompt_tokens": PROMPT_WORDS, "completion_tokens": len(deltas)},
    }
    meta = result.meta
    assert meta["model"] == MODEL and meta["usage_estimated"] is False
    assert 0 < meta["ttft_ms"] <= meta["ms"]
    assert meta["prompt_tokens_estimate"] > 20


@pytest.mark.anyio
async def test_the_descriptor_advertises_the_window_and_the_answer_length(server: OpenAIChatServer) -> None:
    async with llm_node(server, peer=True, context_tokens=4096, max_output_tokens=512, max_concurrent=3) as (
        _,
        caller,
    ):
        (provider,) = caller.providers("llm.chat", params={"model": MODEL, "context_tokens": 1})
        d = provider.descriptor
        assert not provider.is_local and d.streaming and d.trust_required == Level.MEMBER
        assert dict(d.params) == {"model": MODEL, "context_tokens": 4096, "max_output_tokens": 512}
        assert d.max_concurrent == 3
        assert caller.providers("llm.chat", params={"model": "other"}) == []
        with pytest.raises(NotFound):
            await stream_chat(caller, {"messages": MESSAGES}, params={"model": "other"})


@pytest.mark.anyio
async def test_without_usage_from_the_server_it_is_estimated_and_said_so(server: OpenAIChatServer) -> None:
    server.mode = "no_usage"
    async with llm_node(server) as (_, caller):
        _, result = await stream_chat(caller, {"messages": MESSAGES})
    assert result.meta["usage_estimated"] is True
    assert result.output["usage"]["prompt_tokens"] == result.meta["prompt_tokens_estimate"]
    assert result.output["usage"]["completion_tokens"] >= 9


@pytest.mark.anyio
async def test_max_tokens_defaults_to_the_models_max_output(server: OpenAIChatServer) -> None:
    async with llm_node(server, max_output_tokens=77) as (_, caller):
        await stream_chat(caller, {"messages": MESSAGES})
        assert server.requests[-1]["max_tokens"] == 77
        with pytest.raises(BadRequest, match="at most 77 tokens"):
            await stream_chat(caller, {"messages": MESSAGES, "max_tokens": 78})


@pytest.mark.anyio
async def test_a_prompt_over_the_window_is_bad_request_naming_both_numbers(server: OpenAIChatServer) -> None:
    long = [{"role": "user", "content": "boiler pressure " * 300}]
    async with llm_node(server, peer=True, context_tokens=1000, max_output_tokens=200) as (_, caller):
        with pytest.raises(BadRequest) as exc:
            await stream_chat(caller, {"messages": long})
    message = exc.value.message
    assert "context window of 1000 tokens" in message and "up to 200" in message
    assert "about 1" in message  # the estimate, e.g. "about 1210 tokens"
    assert server.requests == []  # refused before the server was asked


@pytest.mark.anyio
async def test_bad_input_is_bad_request_before_the_server_is_asked(server: OpenAIChatServer) -> None:
    async with llm_node(server, peer=True) as (_, caller):
        for bad, words in [
            ({"messages": [{"role": "tool", "content": "x"}]}, "role must be system, user or assistant"),
            ({"messages": [{"role": "user", "content": 5}]}, "content must be a string"),
            ({"messages": MESSAGES, "temperature": 2.5}, "temperature must be from 0 to 2"),
            ({"messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]}, "at most 4 strings"),
            ({"messages": MESSAGES, "prompt": "x"}, "unknown llm.chat input field(s): prompt"),
        ]:
            with pytest.raises(BadRequest, match=words.replace("(", r"\(").replace(")", r"\)")):
                await stream_chat(caller, bad)
    assert server.requests == []


@pytest.mark.anyio
async def test_over_max_concurrent_is_capacity_exceeded_with_retry_after(server: OpenAIChatServer) -> None:
    server.hold_after = 1
    async with llm_node(server, peer=True, max_concurrent=1) as (_, caller):
        seen: list[str] = []
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                input = {"messages": MESSAGES}
                async with caller.stream("llm.chat", params={"model": MODEL}, input=input) as c:
                    await c.end_input()
                    async for frame in c.frames():
                        seen.append(frame["delta"])
                    await c.result()

            tg.start_soon(first)
            await wait_until(lambda: len(seen) == 1)
            with pytest.raises(CapacityExceeded) as exc:
                await stream_chat(caller, {"messages": MESSAGES})
            assert exc.value.retry_after_ms is not None and exc.value.retry_after_ms > 0
            server.release.set()
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("peer", [False, True], ids=["local", "peer"])
async def test_a_stalled_server_is_timeout_within_the_callers_deadline(
    server: OpenAIChatServer, peer: bool
) -> None:
    server.mode = "stall_first"
    async with llm_node(server, peer=peer) as (_, caller):
        started = anyio.current_time()
        with pytest.raises(Timeout):
            await stream_chat(caller, {"messages": MESSAGES}, timeout=1.0)
        assert anyio.current_time() - started < 1.0 + 0.5
        await wait_until(server.disconnected.is_set, timeout=5)  # the HTTP stream was closed


@pytest.mark.anyio
async def test_a_peer_that_walks_away_mid_answer_closes_the_http_stream(server: OpenAIChatServer) -> None:
    server.hold_after = 3
    async with llm_node(server, peer=True) as (_, caller):
        async with caller.stream("llm.chat", params={"model": MODEL}, input={"messages": MESSAGES}) as call:
            await call.end_input()
            frames = call.frames()
            got = [await frames.__anext__() for _ in range(3)]
            assert [f["delta"] for f in got] == words_of(default_reply("[heating#c12]"))[:3]
            assert not server.disconnected.is_set()
        # leaving the block cancels the call: the provider's handler stops and closes the connection
        await wait_until(server.disconnected.is_set, timeout=5)
    assert server.disconnects == 1


@pytest.mark.anyio
async def test_a_model_that_cannot_be_served_is_left_out_with_the_reason(
    server: OpenAIChatServer, tmp_path: Any
) -> None:
    from hearthnet.services.llm import LocalLlmConfig

    service = LlmService(
        LlmConfig(
            openai=(
                OpenAIChatConfig(base_url=server.url, model=MODEL),
                OpenAIChatConfig(base_url=server.url, model="keyed", api_key_env="HN_TEST_UNSET_KEY_VAR"),
            ),
            local=LocalLlmConfig(model_path=tmp_path / "missing.gguf", model="gemma"),
        )
    )
    await service.start()
    try:
        assert [r.descriptor.params["model"] for r in service.registrations()] == [MODEL]
        health = service.health()
        assert health["ok"] and [m["model"] for m in health["models"]] == [MODEL]
        assert "HN_TEST_UNSET_KEY_VAR is not set" in health["unavailable"]["keyed"]
        assert "make local-llm" in health["unavailable"]["gemma"]
    finally:
        await service.stop()
    twice = OpenAIChatConfig(base_url=server.url, model=MODEL)
    with pytest.raises(BadRequest, match="two llm backends serve the same model name: test-chat"):
        await LlmService(LlmConfig(openai=(twice, twice))).start()
