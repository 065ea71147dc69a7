"""The composer's rerank step: ``answer.ask`` with real MiniLM, ChromaDB and RAG over the demo PDFs,
``rerank.text`` and ``llm.chat`` on a linked peer backed by loopback servers (the GPU box's parts
that cannot run here)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hearthnet.answer.rerank import choose_reranker
from hearthnet.bus.api import ProviderInfo
from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.config import AnswerConfig
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.llm import LlmConfig, LlmService, OpenAIChatConfig
from hearthnet.services.rerank import RerankServerConfig, RerankService
from tests.answer_harness import AnswerNode, answer_node, linked, new_bus
from tests.openai_chat_server import CONTEXT_LINE, OpenAIChatServer
from tests.polling import wait_until
from tests.rerank_server import MODEL as RERANKER
from tests.rerank_server import RerankServer, overlap_score

CHAT = "test-chat"
BOILER = "When is the gas boiler serviced, and by whom?"
ALL = AnswerConfig(similarity_threshold=0.0)
"""Every chunk of the corpus reaches the rerank step, the weakest included."""


@pytest.fixture
def chat() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((CHAT,)) as s:
        s.reply = "Every October."  # cites nothing: the sources are the context in its order
        yield s


@pytest.fixture
def reranker() -> Iterator[RerankServer]:
    with RerankServer() as s:
        yield s


@asynccontextmanager
async def mesh(
    root: Path,
    minilm: OnnxModel,
    chat: OpenAIChatServer,
    reranker: RerankServer | None,
    config: AnswerConfig = ALL,
    extra: list[Registration] | None = None,
) -> AsyncIterator[tuple[AnswerNode, CapabilityBus]]:
    """The demo node (corpus ``house``), and a peer serving ``llm.chat`` and ``rerank.text``."""
    peer = new_bus()
    llm = LlmService(LlmConfig(openai=(OpenAIChatConfig(base_url=chat.url, model=CHAT),)))
    servers = [] if reranker is None else [RerankServerConfig(base_url=reranker.url, model=RERANKER)]
    rerank = RerankService(servers)
    for service in (llm, rerank):
        await service.start()
        for registration in service.registrations():
            peer.register(registration)
    for registration in extra or []:
        peer.register(registration)
    try:
        async with answer_node(root, minilm=minilm, config=config) as n:
            await n.ingest("house", "heating_handbook.pdf")
            await n.ingest("house", "garden_and_seeds.pdf")
            async with linked(n.bus, peer):
                yield n, peer
    finally:
        await rerank.stop()
        await llm.stop()


async def dense(n: AnswerNode, question: str = BOILER) -> list[dict[str, Any]]:
    """The corpus's chunks as retrieval ranks them (best first)."""
    found = await n.bus.call("rag.query", params={"corpus": "house"}, input={"query": question, "k": 20})
    chunks: list[dict[str, Any]] = found.output["chunks"]
    return chunks


def prompt_order(chat: OpenAIChatServer) -> list[str]:
    """The chunk ids of the last prompt's context lines, in order."""
    system = chat.requests[-1]["messages"][0]["content"]
    return [chunk_id for _, chunk_id in CONTEXT_LINE.findall(system)]


@pytest.mark.anyio
async def test_the_reranker_puts_the_chunk_it_scores_highest_first_in_the_prompt_and_sources(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    async with mesh(tmp_path, minilm, chat, reranker) as (n, _):
        ranked = await dense(n)
        last = ranked[-1]  # what the dense search ranks last
        reranker.boost = {last["text"]: 1.0}
        out = (await n.ask(BOILER)).output
    ids = [c["metadata"]["chunk_id"] for c in ranked]
    assert len(ids) >= 4 and out["mode"] == "generated"
    meta, debug = out["meta"], out["meta"]["debug"]
    assert meta["rerank"] == "used" and "rerank_error" not in meta
    assert debug["rerank"]["model"] == RERANKER and debug["rerank"]["ms"] > 0
    assert debug["rerank"]["chunks"] == len(ids)
    # first in the prompt the model read, and first among the sources
    order = prompt_order(chat)
    assert order[0] == last["metadata"]["chunk_id"] == out["sources"][0]["chunk_id"]
    assert sorted(order) == sorted(ids)  # reordered, nothing lost
    # the rest in the reranker's order (its scores: the share of the question's words a chunk holds)
    expected = sorted(ranked[:-1], key=lambda c: -overlap_score(BOILER, c["text"]))
    assert order[1:] == [c["metadata"]["chunk_id"] for c in expected]
    # debug: per chunk, the retrieval's cosine beside the reranker's score
    chunks = debug["chunks"]
    assert [c["chunk_id"] for c in chunks] == order
    assert chunks[0]["rerank"] == 1.0
    assert chunks[0]["score"] == pytest.approx(min(c["score"] for c in chunks), abs=1e-6)
    assert [c["rerank"] for c in chunks] == sorted((c["rerank"] for c in chunks), reverse=True)
    assert out["sources"][0]["score"] == pytest.approx(last["score"], abs=1e-6)  # still the cosine
    assert reranker.requests == [("/rerank", RERANKER, len(ids))]


@pytest.mark.anyio
async def test_the_similarity_threshold_stays_on_the_cosine(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    config = AnswerConfig(similarity_threshold=0.3)
    async with mesh(tmp_path, minilm, chat, reranker, config) as (n, _):
        ranked = await dense(n)
        above = [c for c in ranked if c["similarity"] >= 0.3]  # the cosine, beside a hybrid score
        below = [c for c in ranked if c["similarity"] < 0.3]
        assert len(above) >= 2 and below  # the demo corpus has both
        reranker.boost = {c["text"]: 1.0 for c in below}  # the reranker would love them
        out = (await n.ask(BOILER)).output
    assert out["meta"]["rerank"] == "used"
    assert sorted(prompt_order(chat)) == sorted(c["metadata"]["chunk_id"] for c in above)
    assert reranker.requests == [("/rerank", RERANKER, len(above))]  # only those above were sent


@pytest.mark.anyio
async def test_with_the_reranker_down_the_answer_comes_in_retrieval_order_and_says_so(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    async with mesh(tmp_path, minilm, chat, reranker) as (n, _):
        ids = [c["metadata"]["chunk_id"] for c in await dense(n)]
        reranker.close()
        first = (await n.ask(BOILER)).output
        again = (await n.ask(BOILER)).output
    assert first["mode"] == "generated" and first["answer"] == "Every October."
    assert first["meta"]["rerank"] == "failed" and first["meta"]["rerank_error"] == "partition"
    assert first["meta"]["debug"]["rerank"]["model"] == RERANKER
    assert prompt_order(chat) == ids and [s["chunk_id"] for s in first["sources"]] == ids
    assert "rerank" not in first["meta"]["debug"]["chunks"][0]
    assert again["meta"]["cache"] == "miss"  # an answer without its reranker is not kept


@pytest.mark.anyio
async def test_a_slow_reranker_is_given_up_at_rerank_timeout_seconds(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    config = AnswerConfig(similarity_threshold=0.0, rerank_timeout_seconds=0.5)
    reranker.mode = "stall"
    async with mesh(tmp_path, minilm, chat, reranker, config) as (n, _):
        ids = [c["metadata"]["chunk_id"] for c in await dense(n)]
        out = (await n.ask(BOILER)).output
    assert out["meta"]["rerank"] == "failed" and out["meta"]["rerank_error"] == "timeout"
    assert 400 <= out["meta"]["debug"]["rerank"]["ms"] < 3000
    assert prompt_order(chat) == ids


@pytest.mark.anyio
async def test_a_provider_that_answers_the_wrong_number_of_scores_is_a_failure(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer
) -> None:
    async def short(ctx: CallContext) -> dict[str, Any]:
        return {"scores": [1.0]}

    broken = Registration(CapabilityDescriptor("rerank.text", params={"model": "broken"}), short)
    async with mesh(tmp_path, minilm, chat, None, extra=[broken]) as (n, _):
        ids = [c["metadata"]["chunk_id"] for c in await dense(n)]
        out = (await n.ask(BOILER)).output
    assert out["meta"]["rerank"] == "failed" and out["meta"]["rerank_error"] == "internal_error"
    assert prompt_order(chat) == ids


@pytest.mark.anyio
async def test_without_a_reachable_reranker_or_with_rerank_off_nothing_is_asked(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    async with mesh(tmp_path, minilm, chat, None) as (n, _):
        none = (await n.ask(BOILER)).output
    assert none["meta"]["rerank"] == "none" and "rerank" not in none["meta"]["debug"]
    for config in (
        AnswerConfig(similarity_threshold=0.0, rerank=False),
        AnswerConfig(similarity_threshold=0.0, rerank_model="not-served-anywhere"),
    ):
        async with mesh(tmp_path / str(len(reranker.requests)), minilm, chat, reranker, config) as (n, _):
            off = (await n.ask(BOILER)).output
        assert off["meta"]["rerank"] == "none"
    assert reranker.requests == []


@pytest.mark.anyio
async def test_only_the_first_rerank_candidates_are_reordered(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    config = AnswerConfig(similarity_threshold=0.0, rerank_candidates=2, rerank_model=RERANKER)
    async with mesh(tmp_path, minilm, chat, reranker, config) as (n, _):
        ranked = await dense(n)
        ids = [c["metadata"]["chunk_id"] for c in ranked]
        reranker.boost = {ranked[1]["text"]: 1.0, ranked[-1]["text"]: 2.0}
        out = (await n.ask(BOILER)).output
    assert out["meta"]["rerank"] == "used"
    assert prompt_order(chat) == [ids[1], ids[0], *ids[2:]]  # the last stays last: not a candidate
    assert reranker.requests == [("/rerank", RERANKER, 2)]
    assert out["meta"]["debug"]["chunks"][2]["rerank"] is None


@pytest.mark.anyio
async def test_the_reranker_is_part_of_the_cache_key(
    tmp_path: Path, minilm: OnnxModel, chat: OpenAIChatServer, reranker: RerankServer
) -> None:
    async with mesh(tmp_path, minilm, chat, reranker) as (n, peer):
        first = (await n.ask(BOILER)).output
        cached = (await n.ask(BOILER)).output
        peer.unregister("rerank.text", {"model": RERANKER})
        await wait_until(lambda: not n.bus.offers("rerank.text"))
        without = (await n.ask(BOILER)).output
    assert (first["meta"]["rerank"], first["meta"]["cache"]) == ("used", "miss")
    assert (cached["meta"]["rerank"], cached["meta"]["cache"]) == ("used", "hit")
    # an answer ordered by a reranker is not served once that reranker is gone
    assert (without["meta"]["rerank"], without["meta"]["cache"]) == ("none", "miss")
    assert len(reranker.requests) == 1


def offer(model: str, local: bool, node: str = "n1") -> ProviderInfo:
    return ProviderInfo(node, CapabilityDescriptor("rerank.text", params={"model": model}), local)


class Offers:
    def __init__(self, providers: list[ProviderInfo]) -> None:
        self._providers = providers

    def offers(self, capability: str, version: Any = (1, 0)) -> list[ProviderInfo]:
        return [p for p in self._providers if p.descriptor.name == capability]


def test_the_reranker_is_this_nodes_own_first_then_the_first_by_name_unless_one_is_configured() -> None:
    mesh = Offers([offer("b-remote", False), offer("c-own", True), offer("a-remote", False, "n2")])
    assert choose_reranker(mesh, AnswerConfig()) == "c-own"  # type: ignore[arg-type]
    assert choose_reranker(Offers(mesh._providers[::2]), AnswerConfig()) == "a-remote"  # type: ignore[arg-type]
    assert choose_reranker(mesh, AnswerConfig(rerank_model="b-remote")) == "b-remote"  # type: ignore[arg-type]
    assert choose_reranker(mesh, AnswerConfig(rerank_model="absent")) is None  # type: ignore[arg-type]
    assert choose_reranker(mesh, AnswerConfig(rerank=False)) is None  # type: ignore[arg-type]
    assert choose_reranker(Offers([]), AnswerConfig()) is None  # type: ignore[arg-type]
