"""The rerank backend against a real HTTP server on 127.0.0.1 speaking TEI's ``/rerank`` and
the Cohere/Jina ``/v1/rerank``: scores in input order, batching, and every failure as a bus error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from hearthnet.errors import BadRequest, CapacityExceeded, InternalError, NotFound, Partition, Timeout
from hearthnet.services.rerank import RerankBackend, RerankServerConfig
from hearthnet.services.rerank.backend import retry_after_ms
from tests.polling import wait_until
from tests.rerank_server import MODEL, RerankServer, overlap_score

QUERY = "when is the gas boiler serviced"
TEXTS = [
    "Garden beds are dug in spring.",
    "The gas boiler is serviced every October.",
    "A boiler needs water pressure between one and two bar.",
    "Seeds are kept in a cool dry box.",
]


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with RerankServer() as s:
        yield s


@asynccontextmanager
async def backend(
    server: RerankServer, protocol: str = "tei", environ: dict[str, str] | None = None, **config: Any
) -> AsyncIterator[RerankBackend]:
    settings = {"model": MODEL, **config}
    b = RerankBackend(
        RerankServerConfig(base_url=server.url, protocol=protocol, **settings), environ=environ or {}
    )
    try:
        yield b
    finally:
        await b.aclose()


def expected(texts: list[str], server: RerankServer) -> list[float]:
    return [overlap_score(QUERY, t, server.boost) for t in texts]


@pytest.mark.anyio
@pytest.mark.parametrize(("protocol", "route"), [("tei", "/rerank"), ("cohere", "/v1/rerank")])
async def test_scores_come_in_the_order_of_the_texts(server: RerankServer, protocol: str, route: str) -> None:
    async with backend(server, protocol) as b:
        result = await b.score(QUERY, TEXTS)
    assert result.scores == pytest.approx(expected(TEXTS, server))
    assert result.scores[1] > result.scores[2] > result.scores[0] == 0.0  # the server sent them sorted
    assert result.requests == 1
    assert server.requests == [(route, MODEL, 4)]
    if protocol == "tei":  # long passages cut to the model's window, probabilities, no text echoed
        assert server.options == [{"truncate": True, "raw_scores": False, "return_text": False}]
    else:  # every text scored, no text echoed
        assert server.options == [{"model": MODEL, "top_n": 4, "return_documents": False}]


@pytest.mark.anyio
async def test_a_cohere_base_url_may_end_in_v1(server: RerankServer) -> None:
    config = RerankServerConfig(base_url=server.url + "/v1/", model=MODEL, protocol="cohere")
    assert config.endpoint == server.url + "/v1/rerank"
    b = RerankBackend(config)
    try:
        assert (await b.score(QUERY, TEXTS[:2])).requests == 1
        assert server.requests == [("/v1/rerank", MODEL, 2)]
    finally:
        await b.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["tei", "cohere"])
async def test_more_texts_than_max_texts_are_split_and_stitched_back_in_order(
    server: RerankServer, protocol: str
) -> None:
    texts = [f"passage <{i}> about the boiler" for i in range(70)]
    server.boost = {f"<{i}>": ((i * 37) % 70) / 70 for i in range(70)}  # a score per text, no order
    async with backend(server, protocol, max_texts=32) as b:
        result = await b.score(QUERY, texts)
    assert result.scores == pytest.approx(expected(texts, server))
    assert result.requests == 3
    assert sorted(n for _, _, n in server.requests) == [6, 32, 32]


@pytest.mark.anyio
async def test_batches_go_out_at_most_max_concurrent_at_a_time(server: RerankServer) -> None:
    texts = [f"passage {i}" for i in range(5)]
    server.mode = "stall"
    async with backend(server, max_texts=1, max_concurrent=2) as b, anyio.create_task_group() as tg:
        done: dict[str, Any] = {}

        async def run() -> None:
            done["result"] = await b.score(QUERY, texts)

        tg.start_soon(run)
        await wait_until(lambda: server.in_flight == 2)
        server.release.set()
    assert done["result"].requests == 5 and len(server.requests) == 5
    assert server.peak_in_flight == 2


@pytest.mark.anyio
async def test_a_batch_over_the_servers_limit_names_max_texts(server: RerankServer) -> None:
    async with backend(server, max_texts=64) as b:
        with pytest.raises(InternalError, match=r"HTTP 413.*maximum allowed batch size 32.*lower max_texts"):
            await b.score(QUERY, [f"t{i}" for i in range(40)])


@pytest.mark.anyio
async def test_a_server_that_is_down_is_a_partition() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    b = RerankBackend(RerankServerConfig(base_url=f"http://127.0.0.1:{port}", model=MODEL))
    try:
        with pytest.raises(Partition, match="unreachable"):
            await b.score(QUERY, TEXTS)
    finally:
        await b.aclose()


@pytest.mark.anyio
async def test_a_silent_server_is_a_timeout_naming_the_seconds(server: RerankServer) -> None:
    server.mode = "stall"
    async with backend(server, timeout_seconds=0.3) as b:
        with anyio.fail_after(10):
            with pytest.raises(Timeout, match=r"sent nothing for 0.3 s"):
                await b.score(QUERY, TEXTS)


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["tei", "cohere"])
async def test_a_busy_server_is_capacity_exceeded_with_its_retry_after(
    server: RerankServer, protocol: str
) -> None:
    server.mode = "busy"
    async with backend(server, protocol) as b:
        with pytest.raises(CapacityExceeded) as caught:
            await b.score(QUERY, TEXTS)
    assert caught.value.retry_after_ms == 2000


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["tei", "cohere"])
@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("malformed", "malformed JSON"),
        ("short", "returned 3 scores for 4 texts"),
        ("out_of_range", r"without a valid index \(0..3\)"),
        ("duplicate", "twice"),
        ("nan", "not a finite number"),
    ],
)
async def test_a_malformed_short_or_out_of_range_answer_is_an_internal_error(
    server: RerankServer, protocol: str, mode: str, says: str
) -> None:
    server.mode = mode
    async with backend(server, protocol) as b:
        with pytest.raises(InternalError, match=says):
            await b.score(QUERY, TEXTS)


@pytest.mark.anyio
async def test_an_answer_of_the_other_protocol_is_an_internal_error(server: RerankServer) -> None:
    # a TEI server configured as cohere: its /v1/rerank does not exist there, but a list answered to
    # a Cohere-style request must not be read as scores
    async with backend(server, "cohere") as b:
        with pytest.raises(InternalError, match="without a 'results' list"):
            b._parse([{"index": 0, "score": 1.0}], 1)
    async with backend(server, "tei") as b:
        with pytest.raises(InternalError, match="list of"):
            b._parse({"results": []}, 1)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, InternalError),
        (424, InternalError),
        (502, Partition),
        (503, Partition),
        (504, Timeout),
        (422, BadRequest),
        (400, BadRequest),
    ],
)
async def test_http_errors_map_to_bus_errors(server: RerankServer, status: int, error: type) -> None:
    server.mode, server.status = "error", status
    async with backend(server) as b:
        with pytest.raises(error) as caught:
            await b.score(QUERY, TEXTS)
    assert f"HTTP {status}" in caught.value.message


@pytest.mark.anyio
async def test_the_servers_error_message_is_kept(server: RerankServer) -> None:
    server.mode, server.status = "error", 500
    async with backend(server) as b:
        with pytest.raises(InternalError, match="HTTP 500: inference failed"):
            await b.score(QUERY, TEXTS)


@pytest.mark.anyio
async def test_a_model_the_cohere_server_does_not_know_is_not_found(server: RerankServer) -> None:
    async with backend(server, "cohere", model="other-model") as b:
        with pytest.raises(NotFound, match=r"/v1/rerank.*check protocol and base_url: model 'other-model'"):
            await b.score(QUERY, TEXTS)


@pytest.mark.anyio
async def test_a_connection_closed_without_an_answer_is_a_partition(server: RerankServer) -> None:
    server.mode = "hang_up"
    async with backend(server) as b:
        with pytest.raises(Partition):
            await b.score(QUERY, TEXTS)


@pytest.mark.anyio
async def test_the_api_key_comes_from_the_named_variable() -> None:
    with RerankServer(api_key="s3cret") as server:
        async with backend(server, api_key_env="RERANK_KEY", environ={"RERANK_KEY": "s3cret"}) as b:
            assert len((await b.score(QUERY, TEXTS)).scores) == 4
        async with backend(server, api_key_env="RERANK_KEY", environ={"RERANK_KEY": "wrong"}) as b:
            with pytest.raises(InternalError, match=r"refused this node.s API key.*api_key_env"):
                await b.score(QUERY, TEXTS)
    with pytest.raises(BadRequest, match="RERANK_KEY is not set"):
        RerankBackend(
            RerankServerConfig(base_url="http://127.0.0.1:1", model=MODEL, api_key_env="RERANK_KEY"),
            environ={},
        )


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_ms("3") == 3000
    assert retry_after_ms(None) == 1000 and retry_after_ms("soon") == 1000
    assert retry_after_ms("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10_000
    assert retry_after_ms("99999999") == 3_600_000
