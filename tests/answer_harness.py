"""One in-process node for the composer's tests: real bus, MiniLM, ChromaDB, blob store, RAG and answer.

``answer.ask`` is called through the bus exactly as a front door calls it
(``bus.stream``), so its frames, deadline and local-only rule are the real ones.
``linked`` joins a second bus over an authenticated in-memory link, for
providers on "another node" (a stalled corpus, an ``llm.chat`` server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hearthnet.answer.service import AnswerService
from hearthnet.blobs import BlobStore
from hearthnet.bus.bus import CapabilityBus
from hearthnet.community.levels import Level
from hearthnet.config import AnswerConfig
from hearthnet.config.embedding import OpenAIBackendConfig
from hearthnet.contracts import routing
from hearthnet.identity import Identity
from hearthnet.services.base import Service
from hearthnet.services.embedding import EmbeddingConfig, EmbeddingService, OnnxEmbeddingBackend
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.file.service import FileService
from hearthnet.services.rag.service import RagService, RagSettings
from hearthnet.services.rag.store import CorpusStore
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.openai_server import DIM, OpenAIEmbeddingServer
from tests.polling import wait_until

DEMO = Path(__file__).resolve().parent.parent / "hearthnet" / "demo"
MINILM = "all-MiniLM-L6-v2"
OTHER = "hashed-words-64"
"""The model of the loopback OpenAI-compatible embedding server (a second model, as on a GPU node)."""
COMMUNITY = "hc1:answer-test"


def new_bus(identity: Identity | None = None) -> CapabilityBus:
    """A bus whose every peer is a member (the tests link only their own buses)."""
    identity = identity or Identity.generate()
    bus = CapabilityBus(
        identity,
        level_of=lambda n: Level.ANCHOR if n == identity.node_id else Level.MEMBER,
        community_id=lambda: COMMUNITY,
    )
    routing.install(bus)  # the capability families' params rules, as a node gives them
    return bus


@dataclass
class Asked:
    frames: list[dict[str, Any]]
    output: dict[str, Any]

    @property
    def streamed(self) -> str:
        return "".join(f["delta"] for f in self.frames if "delta" in f)


@dataclass
class AnswerNode:
    bus: CapabilityBus
    answer: AnswerService
    rag: RagService
    blobs: BlobStore
    services: list[Service] = field(default_factory=list)

    async def ingest(self, corpus: str, pdf: str) -> dict[str, Any]:
        path = DEMO / pdf
        doc_cid = self.blobs.put_bytes(path.read_bytes()).doc_cid
        async with self.bus.stream(
            "rag.ingest", params={"corpus": corpus}, input={"doc_cid": doc_cid, "filename": pdf}, timeout=120
        ) as call:
            await call.end_input()
            async for _ in call.frames():
                pass
            return (await call.result()).output

    async def ask(self, question: str, **input: Any) -> Asked:
        frames: list[dict[str, Any]] = []
        async with self.bus.stream("answer.ask", input={"question": question, **input}, timeout=120) as call:
            await call.end_input()
            async for frame in call.frames():
                frames.append(frame)
            result = await call.result()
        return Asked(frames, result.output)

    async def call(self, capability: str, **input: Any) -> dict[str, Any]:
        return (await self.bus.call(capability, input=input, timeout=30)).output


@asynccontextmanager
async def answer_node(
    root: Path,
    *,
    minilm: OnnxModel | None,
    other: OpenAIEmbeddingServer | None = None,
    config: AnswerConfig | None = None,
    clock: Callable[[], float] | None = None,
    identity: Identity | None = None,
) -> AsyncIterator[AnswerNode]:
    """Files, embedding, RAG and answer services on one bus, stores under ``root``.

    The node embeds with MiniLM, or with the loopback server's model when
    ``other`` is given (then its RAG corpora are of that model).
    """
    bus = new_bus(identity)
    blobs = BlobStore(root / "blobs")
    files = FileService(bus=bus, store=blobs)
    backends = [OnnxEmbeddingBackend(minilm)] if minilm is not None and other is None else []
    openai = (
        ()
        if other is None
        else (OpenAIBackendConfig(base_url=other.url, model=OTHER, dim=DIM, max_tokens=256),)
    )
    embedding = EmbeddingService(EmbeddingConfig(in_process=False, openai=openai), backends=backends)
    answer = AnswerService(
        bus=bus, config=config or AnswerConfig(), sessions_path=root / "answer.sqlite3", clock=clock
    )

    async def append_event(event_type: str, data: dict[str, Any]) -> str:
        return "ev"

    rag = RagService(
        bus=bus,
        store=CorpusStore(root / "rag"),
        blobs=blobs,
        settings=RagSettings(embedding_model=MINILM if other is None else OTHER),
        append_event=append_event,
        find_event=lambda corpus, doc_cid: None,
        own_level=lambda: Level.TRUSTED,
        corpus_changed=answer.corpus_changed,
    )
    services: list[Service] = [files, embedding, rag, answer]
    for service in services:
        await service.start()
        for registration in service.registrations():
            bus.register(registration)
    try:
        yield AnswerNode(bus, answer, rag, blobs, services)
    finally:
        for service in reversed(services):
            await service.stop()


@asynccontextmanager
async def linked(a: CapabilityBus, b: CapabilityBus) -> AsyncIterator[None]:
    """``a`` and ``b`` joined by one authenticated in-memory link, each holding the other's manifest."""
    a_end, b_end = memory_stream_pair()
    links: dict[str, Any] = {}

    async def respond() -> None:
        links["b"] = await accept_link(
            b_end, identity=b.identity, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
        )

    async with anyio.create_task_group() as tg:
        async with anyio.create_task_group() as hs:
            hs.start_soon(respond)
            links["a"] = await initiate_link(
                a_end, identity=a.identity, community_id=COMMUNITY, admit=lambda _p: None, remote_address="m"
            )
        tg.start_soon(a.attach, links["a"])
        tg.start_soon(b.attach, links["b"])
        tg.start_soon(a.run_announcer)
        tg.start_soon(b.run_announcer)
        await wait_until(
            lambda: b.node_id in a.registry.remote_nodes() and a.node_id in b.registry.remote_nodes()
        )
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
