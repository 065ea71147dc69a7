"""The OpenAI-compatible chat backend against a real HTTP/SSE server on 127.0.0.1."""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Iterator

import anyio
import pytest

from hearthnet.errors import BadRequest, CapacityExceeded, InternalError, NotFound, Partition, Timeout
from hearthnet.runtime.pace import Pace
from hearthnet.services.llm import ChatRequest, OpenAIChatBackend, OpenAIChatConfig
from tests.openai_chat_server import OpenAIChatServer, default_reply, words_of
from tests.polling import wait_until

MODEL = "test-chat"
QUESTION = ChatRequest(
    messages=(
        ("system", "Answer from the context. Context: [manual#p3] The boiler is serviced in October."),
        ("user", "When is the boiler serviced?"),
    )
)


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


def backend_for(server_url: str, **kw: object) -> OpenAIChatBackend:
    return OpenAIChatBackend(OpenAIChatConfig(base_url=server_url, model=MODEL, **kw))  # type: ignore[arg-type]


async def collect(backend: OpenAIChatBackend, request: ChatRequest = QUESTION, max_tokens: int = 64):  # type: ignore[no-untyped-def]
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    completion = await backend.chat(request, max_tokens=max_tokens, on_delta=on_delta)
    return completion, deltas


@pytest.mark.anyio
async def test_streams_deltas_in_order_with_usage(server: OpenAIChatServer) -> None:
    backend = backend_for(server.url)
    try:
        completion, deltas = await collect(backend)
    finally:
        await backend.aclose()
    expected = default_reply("[manual#p3]")
    assert deltas == words_of(expected) and len(deltas) > 3
    assert completion.text == expected and "[manual#p3]" in completion.text
    assert completion.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == len(deltas)
    assert completion.usage.prompt_tokens > 0
    body = server.requests[-1]
    assert server.paths[-1] == "/v1/chat/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][1] == {"role": "user", "content": "When is the boiler serviced?"}
    assert body["max_tokens"] == 64 and "stop" not in body and "temperature" not in body


@pytest.mark.anyio
async def test_max_tokens_stop_and_temperature_reach_the_server(server: OpenAIChatServer) -> None:
    server.reply = "one two three four five six"
    backend = backend_for(server.url + "/v1")  # a base_url ending in /v1 (Ollama's style) works too
    try:
        request = ChatRequest(messages=(("user", "count"),), temperature=0.0, stop=("five",))
        completion, deltas = await collect(backend, request, max_tokens=3)
    finally:
        await backend.aclose()
    assert server.paths[-1] == "/v1/chat/completions"
    assert server.requests[-1]["temperature"] == 0.0 and server.requests[-1]["stop"] == ["five"]
    assert deltas == ["one", " two", " three"] and completion.finish_reason == "length"


@pytest.mark.anyio
async def test_a_server_that_sends_no_usage_gives_none(server: OpenAIChatServer) -> None:
    server.mode = "no_usage"
    backend = backend_for(server.url)
    try:
        completion, _ = await collect(backend)
    finally:
        await backend.aclose()
    assert completion.usage is None and completion.finish_reason == "stop"


@pytest.mark.anyio
async def test_plain_prompt_format_uses_completions_and_stops_at_newline(server: OpenAIChatServer) -> None:
    server.reply = "In October.\nUser: and in spring?"
    backend = backend_for(server.url, prompt_format="plain")
    try:
        completion, _ = await collect(backend)
    finally:
        await backend.aclose()
    assert server.paths[-1] == "/v1/completions"
    body = server.requests[-1]
    assert body["prompt"].endswith("User: When is the boiler serviced?\nAssistant:")
    assert body["prompt"].startswith("Answer from the context.")
    assert body["stop"] == ["\n"]
    assert completion.text == "In October."


@pytest.mark.anyio
async def test_429_is_capacity_exceeded_with_the_servers_retry_after(server: OpenAIChatServer) -> None:
    server.mode = "busy"
    backend = backend_for(server.url)
    try:
        server.retry_after = "7"
        with pytest.raises(CapacityExceeded) as exc:
            await collect(backend)
        assert exc.value.retry_after_ms == 7000 and "HTTP 429" in exc.value.message
        server.retry_after = email.utils.formatdate(time.time() + 30, usegmt=True)
        with pytest.raises(CapacityExceeded) as exc:
            await collect(backend)
        assert exc.value.retry_after_ms is not None and 27_000 <= exc.value.retry_after_ms <= 31_000
        server.retry_after = None
        with pytest.raises(CapacityExceeded) as exc:
            await collect(backend)
        assert exc.value.retry_after_ms == 1000
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_500_is_internal_error_with_the_servers_message(server: OpenAIChatServer) -> None:
    server.mode = "error"
    backend = backend_for(server.url)
    try:
        with pytest.raises(InternalError) as exc:
            await collect(backend)
    finally:
        await backend.aclose()
    assert "HTTP 500" in exc.value.message and "the model crashed" in exc.value.message


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "retry_after", "error", "words"),
    [
        (502, None, Partition, "HTTP 502"),
        (503, None, Partition, "not ready (HTTP 503)"),
        (503, "4", CapacityExceeded, "busy (HTTP 503)"),
        (504, None, Timeout, "HTTP 504"),
        (400, None, BadRequest, "refused the request (HTTP 400): the model crashed"),
        (401, None, InternalError, "refused this node's API key (HTTP 401)"),
    ],
)
async def test_each_http_status_has_its_error(
    server: OpenAIChatServer, status: int, retry_after: str | None, error: type[Exception], words: str
) -> None:
    server.mode, server.status, server.retry_after = "error", status, retry_after
    backend = backend_for(server.url)
    try:
        with pytest.raises(error) as exc:
            await collect(backend)
    finally:
        await backend.aclose()
    assert words in str(exc.value)
    if error is CapacityExceeded:
        assert getattr(exc.value, "retry_after_ms", None) == 4000


@pytest.mark.anyio
async def test_the_api_key_is_sent_from_the_variable_named_in_config() -> None:
    with OpenAIChatServer((MODEL,), api_key="s3cret") as keyed:
        config = OpenAIChatConfig(base_url=keyed.url, model=MODEL, api_key_env="HN_TEST_KEY")
        good = OpenAIChatBackend(config, environ={"HN_TEST_KEY": "s3cret"})
        bad = OpenAIChatBackend(config, environ={"HN_TEST_KEY": "wrong"})
        try:
            completion, _ = await collect(good)
            assert completion.finish_reason == "stop"
            with pytest.raises(InternalError, match="API key"):
                await collect(bad)
        finally:
            await good.aclose()
            await bad.aclose()


@pytest.mark.anyio
async def test_an_unknown_model_is_not_found(server: OpenAIChatServer) -> None:
    backend = OpenAIChatBackend(OpenAIChatConfig(base_url=server.url, model="other-model"))
    try:
        with pytest.raises(NotFound, match="HTTP 404"):
            await collect(backend)
    finally:
        await backend.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["stall_first", "stall_mid"])
async def test_a_silent_server_is_a_timeout_within_its_deadline(server: OpenAIChatServer, mode: str) -> None:
    """Mid-answer the deadline is ``timeout_seconds`` of silence; before the first token it is
    the prompt's deadline (its size at the server's pace), never less than ``timeout_seconds``."""
    server.mode = mode
    backend = backend_for(server.url, timeout_seconds=0.5)
    backend.prefill = Pace(per_unit=0.001, floor=0.5, slack=2.0, overhead=0.1)
    units = QUESTION.chars // 4
    wait = backend.prefill.deadline(units, [MODEL]) if mode == "stall_first" else 0.5
    started = anyio.current_time()
    try:
        with pytest.raises(Timeout, match=rf"sent nothing for {wait:g} s"):
            await collect(backend)
    finally:
        await backend.aclose()
    assert 0.5 - 0.05 <= anyio.current_time() - started < wait + 1.0
    # the stream was closed: the server sees the connection go
    await wait_until(server.disconnected.is_set, timeout=5)


@pytest.mark.anyio
async def test_a_first_token_slower_than_timeout_seconds_is_waited_for_a_long_prompt(
    server: OpenAIChatServer,
) -> None:
    """A fixed first-token timeout failed every long prompt on a slow server (a Pi's CPU model
    reads a 4,000-token prompt for a minute); the wait now follows the prompt's size."""
    server.first_token_delay = 1.0
    backend = backend_for(server.url, timeout_seconds=0.5)  # silence mid-answer: 0.5 s
    long_question = ChatRequest(messages=(("user", "compost " * 400),))  # ~800 tokens at ~5 ms each
    try:
        with anyio.fail_after(60):
            completion, deltas = await collect(backend, long_question)
    finally:
        await backend.aclose()
    assert deltas and completion.finish_reason == "stop"
    assert backend.prefill.per_unit([MODEL]) > 0  # the pace it showed is kept for the next prompt


@pytest.mark.anyio
async def test_a_malformed_chunk_is_internal_error(server: OpenAIChatServer) -> None:
    server.mode = "malformed"
    backend = backend_for(server.url)
    try:
        with pytest.raises(InternalError, match="not JSON"):
            await collect(backend)
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_a_server_hanging_up_mid_answer_is_partition(server: OpenAIChatServer) -> None:
    server.mode = "hang_up"
    backend = backend_for(server.url)
    try:
        with pytest.raises(Partition):
            await collect(backend)
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_nobody_listening_is_partition() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    backend = backend_for(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(Partition, match="unreachable"):
            await collect(backend)
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_a_server_that_does_not_stream_is_read_whole(server: OpenAIChatServer) -> None:
    backend = backend_for(server.url)
    original = backend._body

    def no_stream(request: ChatRequest, max_tokens: int) -> dict[str, object]:
        return {**original(request, max_tokens), "stream": False}

    backend._body = no_stream  # type: ignore[method-assign]
    try:
        completion, deltas = await collect(backend)
    finally:
        await backend.aclose()
    assert deltas == [completion.text] and "[manual#p3]" in completion.text
    assert completion.usage is not None and completion.finish_reason == "stop"


@pytest.mark.anyio
async def test_cancelling_the_caller_closes_the_http_stream(server: OpenAIChatServer) -> None:
    server.hold_after = 2
    backend = backend_for(server.url)
    seen: list[str] = []
    try:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                async def on_delta(text: str) -> None:
                    seen.append(text)

                await backend.chat(QUESTION, max_tokens=64, on_delta=on_delta)

            tg.start_soon(run)
            await wait_until(lambda: len(seen) == 2)
            assert not server.disconnected.is_set()
            tg.cancel_scope.cancel()
        await wait_until(server.disconnected.is_set, timeout=5)
        assert server.disconnects == 1
    finally:
        await backend.aclose()


def test_config_is_checked_with_the_setting_named() -> None:
    with pytest.raises(BadRequest, match="base_url"):
        OpenAIChatConfig(base_url="ftp://x", model=MODEL)
    with pytest.raises(BadRequest, match=r"max_output_tokens \(4096\).*context_tokens \(4096\)"):
        OpenAIChatConfig(base_url="http://x", model=MODEL, context_tokens=4096, max_output_tokens=4096)
    with pytest.raises(BadRequest, match="prompt_format"):
        OpenAIChatConfig(base_url="http://x", model=MODEL, prompt_format="raw")
    with pytest.raises(BadRequest, match="API key variable HN_TEST_NO_SUCH_KEY"):
        OpenAIChatBackend(
            OpenAIChatConfig(base_url="http://x", model=MODEL, api_key_env="HN_TEST_NO_SUCH_KEY"), environ={}
        )
