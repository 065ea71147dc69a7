"""Answers people can trust (issues 29.4 and 34.1-2): a citation of a chunk never retrieved never
leaves the composer, whatever its shape and however the model's stream splits it; quoted document
text cannot pose as a citation; and a question the documents do not answer gets "the documents do
not say", with no model asked.  Real ``llm.chat`` on a peer against the loopback chat server,
real MiniLM, ChromaDB and RAG."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.llm.openai_backend import OpenAIChatConfig
from hearthnet.services.llm.service import LlmConfig, LlmService
from tests.answer_harness import AnswerNode, answer_node, linked, new_bus
from tests.openai_chat_server import BOGUS_MARKERS, OpenAIChatServer

MODEL = "test-chat"
BOILER = "When is the gas boiler serviced, and by whom?"
MARKER = re.compile(r"\[([^\[\]]*#[^\[\]]*)\]")
"""Any closed bracket holding a "#" (what the Ask page turned into a chip)."""
PLANS = (
    "Boiler service plans for the winter. The gas boiler is serviced every October by the engineer, "
    "as written in the secret plans [secret-plans.pdf#p4] and in [x y#§1]. "
    "The filling loop under the boiler tops up the pressure."
)


@pytest.fixture
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@asynccontextmanager
async def with_llm(root: Path, minilm: OnnxModel, server: OpenAIChatServer) -> AsyncIterator[AnswerNode]:
    service = LlmService(LlmConfig(openai=(OpenAIChatConfig(base_url=server.url, model=MODEL),)))
    peer = new_bus()
    await service.start()
    for registration in service.registrations():
        peer.register(registration)
    try:
        async with answer_node(root, minilm=minilm) as n:
            await n.ingest("house", "heating_handbook.pdf")
            async with linked(n.bus, peer):
                yield n
    finally:
        await service.stop()


def markers_outside(text: str, context: set[str]) -> list[str]:
    """Markers of ``text`` naming anything but a chunk of ``context``."""
    return [m.group() for m in MARKER.finditer(text) if m.group(1).rsplit("#", 1)[1] not in context]


@pytest.mark.anyio
@pytest.mark.parametrize("piece", [1, 3, 7, None])
async def test_a_streamed_answer_never_carries_a_citation_of_a_chunk_never_retrieved(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer, piece: int | None
) -> None:
    server.hostile, server.piece_chars = True, piece  # markers split across deltas
    async with with_llm(tmp_path, minilm, server) as n:
        asked = await n.ask(BOILER)
    out = asked.output
    context = {c["chunk_id"] for c in out["sources"]}
    deltas = [f["delta"] for f in asked.frames if "delta" in f]
    assert out["mode"] == "generated" and len(deltas) > 3
    # what streamed is exactly what the answer is, and no marker in it names anything unretrieved
    assert asked.streamed == out["answer"]
    assert markers_outside(asked.streamed, context) == []
    for bogus in ("secret-plans", "[a#b]", "§1", "deadbeefcafe0000"):
        assert bogus not in asked.streamed
    # the real citation stays, twice, named by its file; the four made-up ones are reported
    (cited,) = out["citations"]
    assert asked.streamed.count(f"[heating_handbook.pdf#{cited['chunk_id']}]") == 2
    assert out["meta"]["citations_removed"] == len(BOGUS_MARKERS)
    announced = [f for f in asked.frames if f.get("stage") == "answer"]
    assert announced[0]["mode"] == "generated"
    assert {c["chunk_id"] for c in announced[0]["context"]} >= {cited["chunk_id"]}


async def ingest_text(n: AnswerNode, corpus: str, name: str, text: str) -> None:
    doc_cid = n.blobs.put_bytes(text.encode()).doc_cid
    async with n.bus.stream(
        "rag.ingest", params={"corpus": corpus}, input={"doc_cid": doc_cid, "filename": name}, timeout=120
    ) as call:
        await call.end_input()
        async for _ in call.frames():
            pass
        await call.result()


@pytest.mark.anyio
async def test_an_extractive_answer_quotes_a_documents_marker_as_text_never_as_a_citation(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await ingest_text(n, "house", "plans.txt", PLANS)
        asked = await n.ask("When is the gas boiler serviced according to the plans?")
        again = await n.ask("When is the gas boiler serviced according to the plans?")
    out = asked.output
    # from the cache too, the answer frame says where the cited chunks are (a door numbers them)
    assert again.output["meta"]["cache"] == "hit" and again.streamed == out["answer"]
    (frame,) = [f for f in again.frames if f.get("stage") == "answer"]
    assert {c["chunk_id"] for c in out["citations"]} <= {c["chunk_id"] for c in frame["context"]}
    assert out["mode"] == "extractive" and asked.streamed == out["answer"]
    assert "secret plans (secret-plans.pdf#p4)" in out["answer"]  # quoted, its brackets neutralised
    context = {c["chunk_id"] for c in out["sources"]}
    assert markers_outside(out["answer"], context) == []
    assert [c["file"] for c in out["citations"]] == ["plans.txt"]


@pytest.mark.anyio
async def test_a_question_the_documents_do_not_answer_abstains_without_asking_the_model(
    tmp_path: Path, minilm: OnnxModel, server: OpenAIChatServer
) -> None:
    async with with_llm(tmp_path, minilm, server) as n:
        off = await n.ask("What is the capital of France?")
        on = await n.ask(BOILER)
        extractive = await n.ask("What is the capital of France?", model="no-such-model")
    assert len(server.requests) == 1  # the boiler question only
    for asked in (off, extractive):
        out = asked.output
        assert out["mode"] == "abstained" and out["citations"] == []
        assert out["answer"].startswith("The documents do not say") and asked.streamed == out["answer"]
        assert out["meta"]["abstain"]["best"] < out["meta"]["abstain"]["bar"]
        assert out["sources"] and all(s["nearest"] and not s["cited"] for s in out["sources"])
        assert next(f for f in asked.frames if f.get("stage") == "answer")["mode"] == "abstained"
    assert on.output["mode"] == "generated" and "abstain" not in on.output["meta"]
