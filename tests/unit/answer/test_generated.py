"""Generated answers: ``answer.ask`` with the real ``llm.chat`` service on a peer, against a loopback
OpenAI-compatible chat server (the one part that cannot run here), and real RAG over the demo PDFs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hearthnet.answer.compose import choose_model
from hearthnet.bus.api import ProviderInfo
from hearthnet.bus.descriptors import CapabilityDescriptor
from hearthnet.config import AnswerConfig
from hearthnet.contracts.llm import estimate_prompt_tokens
from hearthnet.errors import BusError
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.llm.openai_backend import OpenAIChatConfig
from hearthnet.services.llm.service import LlmConfig, LlmService
from tests.answer_harness import AnswerNode, answer_node, linked, new_bus
from tests.openai_chat_server import OpenAIChatServer

MODEL = "test-chat"
BOILER = "When is the gas boiler serviced, and by whom?"
MADE_UP = "ffffffffffffffffffffffffffffffff"


def prompt_tokens(messages: list[dict[str, str]]) -> int:
    """What llm.chat's window check counts for these messages."""
    return estimate_prompt_tokens((m["role"], m["content"]) for m in messages)


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@asynccontextmanager
async def with_llm(
    root: Path, minilm: OnnxModel, server: OpenAIChatServer, config: AnswerConfig | None = None, **llm: Any
) -> AsyncIterator[AnswerNode]:
    """The demo node, and ``llm.chat`` for ``MODEL`` on a linked peer (the mesh's GPU box)."""
    service = LlmService(LlmConfig(openai=(OpenAIChatConfig(base_url=server.url, model=MODEL, **llm),)))
    peer = new_bus()
    await service.start()
    for registration in service.registrations():
        peer.register(registration)
    try:
        async with answer_node(root, minilm=minilm, config=config) as n:
            await n.ingest("house", "heating_handbook.pdf")
            await n.ingest("house", "garden_and_seeds.pdf")
            async with linked(n.bus, peer):
                yield n
    finally:
        await service.stop()


async def top_chunk(n: AnswerNode, question: str) -> str:
    found = await n.bus.call("rag.query", params={"corpus": "house"}, input={"query": question, "k": 1})
    chunk_id: str = found.output["chunks"][0]["metadata"]["chunk_id"]
    return chunk_id


@pytest.mark.anyio
async def test_a_generated_answer_streams_its_tokens_and_keeps_only_citations_of_the_context(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    async with with_llm(tmp_path, minilm, server) as n:
        good = await top_chunk(n, BOILER)
        server.reply = (
            f"It is serviced every October by a registered engineer [Heating and Hot Water Handbook#{good}], "
            f"and blessed by a priest [blessings.pdf#{MADE_UP}]."
        )
        asked = await n.ask(BOILER)
    out = asked.output
    assert out["mode"] == "generated" and out["meta"]["model"] == MODEL and out["meta"]["rag"] == "used"
    deltas = [f["delta"] for f in asked.frames if "delta" in f]
    assert len(deltas) > 10  # word by word, as the model wrote it, citations checked on the way
    assert asked.streamed == out["answer"] and MADE_UP not in asked.streamed
    # the made-up citation is gone; the real one names the chunk's file, not the title the model wrote
    assert out["answer"] == (
        f"It is serviced every October by a registered engineer [heating_handbook.pdf#{good}], "
        "and blessed by a priest."
    )
    assert out["meta"]["citations_removed"] == 1
    assert out["citations"] == [
        {"chunk_id": good, "file": "heating_handbook.pdf", "page": 1, "corpus": "house"}
    ]
    assert out["sources"][0]["chunk_id"] == good and out["sources"][0]["cited"]
    assert not any(s["cited"] for s in out["sources"][1:])
    debug = out["meta"]["debug"]
    assert debug["ttft_ms"] is not None and 0 < debug["ttft_ms"] <= debug["total_ms"]
    # what the model was sent: system (instructions + context lines), then the question
    (request,) = server.requests
    system, user = request["messages"]
    assert system["role"] == "system" and system["content"].startswith(AnswerConfig().system_prompt)
    line = f'\n- From heating_handbook.pdf#{good} (page 1): "Heating and Hot Water Handbook The gas boiler'
    assert line in system["content"]
    assert user == {"role": "user", "content": BOILER}
    assert debug["tokens"]["prompt"] == prompt_tokens(request["messages"])
    assert (
        debug["tokens"]["prompt"] + debug["tokens"]["max_tokens"] <= 8192 == debug["tokens"]["model_window"]
    )


@pytest.mark.anyio
async def test_the_context_fits_a_small_model_window_with_room_for_the_answer(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    config = AnswerConfig(similarity_threshold=0.0)
    async with with_llm(tmp_path, minilm, server, config, context_tokens=640, max_output_tokens=200) as n:
        out = (await n.ask(BOILER)).output
    tokens = out["meta"]["debug"]["tokens"]
    assert out["mode"] == "generated", out["meta"]  # llm.chat accepted the prompt: it fits its window
    assert tokens["max_tokens"] == 200 and tokens["model_window"] == 640
    assert tokens["prompt"] + 200 <= 640 and tokens["context_room"] < 640
    assert 1 <= out["meta"]["chunks"] < 5  # the demo's 5 house chunks do not all fit
    assert prompt_tokens(server.requests[0]["messages"]) == tokens["prompt"]  # summed from the parts


@pytest.mark.anyio
async def test_a_follow_up_question_sees_the_sessions_earlier_turns(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    async with with_llm(tmp_path, minilm, server) as n:
        server.reply = "Every October."
        await n.ask(BOILER, session="kitchen")
        server.reply = "In the blue folder."
        follow = (await n.ask("Where is its record kept?", session="kitchen")).output
        alone = (await n.ask("Where is its record kept?")).output
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert server.requests[1]["messages"][1:] == [
        {"role": "user", "content": BOILER},
        {"role": "assistant", "content": "Every October."},
        {"role": "user", "content": "Where is its record kept?"},
    ]
    assert follow["mode"] == "generated" and follow["meta"]["debug"]["tokens"]["history"] > 0
    # asked alone, the vague question matches no passage well enough: the documents do not say,
    # and the model is not asked (a follow-up leans on its turns, so the model decides there)
    assert alone["mode"] == "abstained" and len(server.requests) == 2


@pytest.mark.anyio
async def test_a_model_that_fails_before_its_first_token_gives_way_to_the_extractive_answer(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    async with with_llm(tmp_path, minilm, server) as n:
        server.mode = "error"
        failed = (await n.ask(BOILER)).output
        server.mode = "normal"
        server.reply = "Every October."
        recovered = (await n.ask(BOILER)).output
    assert failed["mode"] == "extractive" and failed["meta"]["llm_error"] == "internal_error"
    assert "early October" in failed["answer"] and failed["citations"]
    assert (
        recovered["meta"]["cache"] == "miss" and recovered["mode"] == "generated"
    )  # the fallback was not cached


@pytest.mark.anyio
async def test_a_model_that_breaks_off_mid_answer_is_an_error_and_leaves_no_turn(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    async with with_llm(tmp_path, minilm, server) as n:
        server.mode = "hang_up"
        with pytest.raises(BusError) as caught:
            await n.ask(BOILER, session="kitchen")
        assert caught.value.code in ("internal_error", "partition")
        assert (await n.call("answer.sessions"))["sessions"] == [] and len(n.answer.cache) == 0


def provider(model: str, window: int | None, node: str = "n1") -> ProviderInfo:
    params: dict[str, Any] = {"model": model, "max_output_tokens": 512}
    if window is not None:
        params["context_tokens"] = window
    return ProviderInfo(node, CapabilityDescriptor("llm.chat", params=params), False)


class Registry:
    def __init__(self, providers: list[ProviderInfo]) -> None:
        self._providers = providers

    def offers(self, capability: str, version: Any = (1, 0)) -> list[ProviderInfo]:
        return list(self._providers)


def test_the_model_with_the_largest_window_is_chosen_unless_one_is_configured() -> None:
    mesh = Registry(
        [
            provider("small", 4096),
            provider("big", 131072),
            provider("big", 32768, "n2"),
            provider("odd", None),
        ]
    )
    chosen = choose_model(mesh, None)  # type: ignore[arg-type]
    assert (
        chosen is not None and chosen.model == "big" and chosen.context_tokens == 32768
    )  # its smallest provider
    configured = choose_model(mesh, "small")  # type: ignore[arg-type]
    assert configured is not None and configured.model == "small" and configured.max_output_tokens == 512
    assert choose_model(mesh, "absent") is None  # type: ignore[arg-type]
    assert choose_model(Registry([]), None) is None  # type: ignore[arg-type]
