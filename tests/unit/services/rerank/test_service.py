"""``rerank.text`` through real buses: called on the node that serves it and from a peer over an
authenticated in-memory link, against a real rerank server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from hearthnet.bus.bus import CapabilityBus
from hearthnet.community.levels import Level
from hearthnet.config import config_from_mapping
from hearthnet.errors import BadRequest, CapacityExceeded, InternalError, NotFound, Partition, Timeout
from hearthnet.identity import Identity
from hearthnet.node import rerank_service
from hearthnet.services.rerank import RerankServerConfig, RerankService
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.polling import wait_until
from tests.rerank_server import MODEL, RerankServer, overlap_score

COMMUNITY = "hc1:rerank-test"
QUERY = "when is the gas boiler serviced"
TEXTS = [
    "Garden beds are dug in spring.",
    "The gas boiler is serviced every October.",
    "A boiler needs water pressure between one and two bar.",
]


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with RerankServer() as s:
        yield s


@asynccontextmanager
async def rerank_nodes(
    servers: list[RerankServerConfig], *, peer: bool = True
) -> AsyncIterator[tuple[CapabilityBus, CapabilityBus, RerankService]]:
    """A bus serving ``rerank.text``, and the bus that calls it (a linked peer, or itself)."""
    ids = [Identity.generate(), Identity.generate()]
    levels = {i.node_id: Level.MEMBER for i in ids}
    buses = [CapabilityBus(i, level_of=levels.get, community_id=lambda: COMMUNITY) for i in ids]
    service = RerankService(servers)
    await service.start()
    for registration in service.registrations():
        buses[0].register(registration)
    try:
        async with anyio.create_task_group() as tg:
            if peer:
                a_end, b_end = memory_stream_pair()
                links: dict[str, Any] = {}

                async def accept() -> None:
                    links["b"] = await accept_link(
                        b_end,
                        identity=ids[1],
                        community_id=COMMUNITY,
                        admit=lambda _p: None,
                        remote_address="m",
                    )

                async with anyio.create_task_group() as hs:
                    hs.start_soon(accept)
                    links["a"] = await initiate_link(
                        a_end,
                        identity=ids[0],
                        community_id=COMMUNITY,
                        admit=lambda _p: None,
                        remote_address="m",
                    )
                tg.start_soon(buses[0].attach, links["a"])
                tg.start_soon(buses[1].attach, links["b"])
                await wait_until(lambda: bool(buses[1].providers("rerank.text")))
            try:
                yield buses[0], (buses[1] if peer else buses[0]), service
            finally:
                tg.cancel_scope.cancel()
    finally:
        await service.stop()


def config(server: RerankServer, **settings: Any) -> RerankServerConfig:
    return RerankServerConfig(base_url=server.url, **{"model": MODEL, **settings})


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", ["tei", "cohere"])
@pytest.mark.parametrize("peer", [False, True], ids=["local", "peer"])
async def test_scores_come_back_in_input_order_with_model_and_timing(
    server: RerankServer, protocol: str, peer: bool
) -> None:
    async with rerank_nodes([config(server, protocol=protocol)], peer=peer) as (provider, caller, _):
        with capture_logs() as logs:
            result = await caller.call(
                "rerank.text", params={"model": MODEL}, input={"query": QUERY, "texts": TEXTS}, timeout=10
            )
    assert result.output["scores"] == pytest.approx([overlap_score(QUERY, t) for t in TEXTS])
    assert result.meta["model"] == MODEL and result.meta["ms"] > 0 and result.meta["requests"] == 1
    assert result.provider == provider.node_id
    # one line per call, with counts; neither the query nor a text
    (line,) = [entry for entry in logs if entry["event"] == "rerank.text"]
    assert line["texts"] == 3 and line["model"] == MODEL
    assert not any(w in str(logs) for w in ("boiler", "Garden", "serviced"))


@pytest.mark.anyio
async def test_a_large_call_is_batched_by_the_provider(server: RerankServer) -> None:
    texts = [f"passage <{i}>" for i in range(256)]
    server.boost = {f"<{i}>": ((i * 101) % 256) / 256 for i in range(256)}
    async with rerank_nodes([config(server)]) as (_, caller, _):
        result = await caller.call("rerank.text", input={"query": QUERY, "texts": texts}, timeout=20)
    assert result.output["scores"] == pytest.approx([overlap_score(QUERY, t, server.boost) for t in texts])
    assert result.meta["requests"] == 8 and len(server.requests) == 8


@pytest.mark.anyio
async def test_the_descriptor_advertises_the_model_and_bounds(server: RerankServer) -> None:
    async with rerank_nodes([config(server, max_concurrent=2, timeout_seconds=3, max_texts=64)]) as (
        _,
        caller,
        service,
    ):
        (remote,) = caller.providers("rerank.text", params={"model": MODEL})
        assert caller.providers("rerank.text", params={"model": "other"}) == []
        assert service.health() == {
            "ok": True,
            "models": [{"model": MODEL, "protocol": "tei", "max_texts": 64}],
            "unavailable": {},
        }
    d = remote.descriptor
    assert dict(d.params) == {"model": MODEL} and d.idempotent and d.max_concurrent == 2
    assert d.timeout_seconds == pytest.approx(3 * 2 + 5)  # 4 requests for 256 texts, 2 at a time


BAD_INPUTS = [
    ({"query": QUERY}, "input.texts must be a list of 1..256 strings"),
    ({"query": QUERY, "texts": []}, "input.texts holds 0 texts; send 1..256"),
    ({"query": QUERY, "texts": ["t"] * 257}, "input.texts holds 257 texts"),
    ({"query": QUERY, "texts": ["t", 3]}, "input.texts[1] is int, not a string"),
    ({"query": QUERY, "texts": ["x" * 8193]}, "input.texts[0] has 8193 characters; the limit is 8192"),
    ({"query": "q" * 8193, "texts": ["t"]}, "input.query has 8193 characters; the limit is 8192"),
    ({"query": "  ", "texts": ["t"]}, "input.query must be a non-empty string"),
    ({"texts": ["t"]}, "input.query must be a non-empty string"),
    ({"query": QUERY, "texts": ["t"], "top_n": 1}, "unknown rerank.text input field(s): top_n"),
]


@pytest.mark.anyio
async def test_bad_input_is_bad_request_before_the_server_is_asked(server: RerankServer) -> None:
    async with rerank_nodes([config(server)]) as (_, caller, _):
        for input, words in BAD_INPUTS:
            with pytest.raises(BadRequest) as caught:
                await caller.call("rerank.text", input=input, timeout=10)
            assert words in caught.value.message, input
        # at the limits exactly: accepted
        ok = await caller.call(
            "rerank.text", input={"query": "q" * 8192, "texts": ["x" * 8192] + ["t"] * 255}, timeout=20
        )
    assert len(ok.output["scores"]) == 256
    assert sum(n for _, _, n in server.requests) == 256  # only the good call reached the server


@pytest.mark.anyio
async def test_a_model_not_served_is_not_found(server: RerankServer) -> None:
    async with rerank_nodes([config(server)], peer=False) as (_, caller, _):
        with pytest.raises(NotFound):
            await caller.call(
                "rerank.text", params={"model": "other"}, input={"query": QUERY, "texts": TEXTS}
            )


@pytest.mark.anyio
async def test_server_failures_reach_the_caller_as_their_bus_errors(server: RerankServer) -> None:
    async with rerank_nodes([config(server, timeout_seconds=0.5)]) as (_, caller, _):

        async def ask() -> Any:
            return await caller.call("rerank.text", input={"query": QUERY, "texts": TEXTS}, timeout=10)

        server.mode = "busy"
        with pytest.raises(CapacityExceeded) as busy:
            await ask()
        assert busy.value.retry_after_ms == 2000
        server.mode = "short"
        with pytest.raises(InternalError, match="returned 2 scores for 3 texts"):
            await ask()
        server.mode = "stall"
        with pytest.raises(Timeout, match=r"sent nothing for 0\.5 s"):
            await ask()
        server.release.set()
        server.mode = "normal"
        assert len((await ask()).output["scores"]) == 3
    server.close()
    async with rerank_nodes([config(server)]) as (_, caller, _):
        with pytest.raises(Partition):
            await caller.call("rerank.text", input={"query": QUERY, "texts": TEXTS}, timeout=10)


@pytest.mark.anyio
async def test_the_callers_deadline_bounds_a_slow_server(server: RerankServer) -> None:
    server.mode = "stall"
    async with rerank_nodes([config(server, timeout_seconds=30)]) as (_, caller, _):
        with anyio.fail_after(10), pytest.raises(Timeout):
            await caller.call("rerank.text", input={"query": QUERY, "texts": TEXTS}, timeout=0.5)


@pytest.mark.anyio
async def test_a_server_whose_key_is_missing_is_left_out_and_said_why(server: RerankServer) -> None:
    missing = config(server, model="keyed", api_key_env="HEARTHNET_TEST_NO_SUCH_KEY")
    async with rerank_nodes([missing, config(server)], peer=False) as (_, caller, service):
        assert [p.descriptor.params["model"] for p in caller.providers("rerank.text")] == [MODEL]
    health = service.health()
    assert health["unavailable"] == {
        "keyed": "rerank model 'keyed': the API key variable HEARTHNET_TEST_NO_SUCH_KEY is not set"
    }


@pytest.mark.anyio
async def test_two_servers_of_one_model_are_refused(server: RerankServer) -> None:
    service = RerankService([config(server), config(server, protocol="cohere")])
    with pytest.raises(BadRequest, match="serve the same model name"):
        await service.start()


def test_the_node_runs_the_service_only_when_a_server_is_configured(tmp_path: Path) -> None:
    def built(table: dict[str, Any]) -> Any:
        parts = SimpleNamespace(config=config_from_mapping(tmp_path, {"rerank": table}))
        return rerank_service(parts)  # type: ignore[arg-type]

    assert built({}) is None
    one = {"servers": [{"base_url": "http://127.0.0.1:8081", "model": MODEL}]}
    assert built({**one, "enabled": False}) is None
    service = built(one)
    assert isinstance(service, RerankService) and service.name == "rerank"
