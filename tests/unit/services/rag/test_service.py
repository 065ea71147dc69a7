"""The RAG service on one in-process node: real bus, real MiniLM, real ChromaDB and blob store.

Its outgoing calls (``embed.text``, ``file.fetch``) go through a real
:class:`CapabilityBus` to the real embedding and file services.  Its handlers
are called with a small :class:`CallContext` whose ``send`` can run a step of
the test, so that a race (an ingest during a reindex, ...) happens at a chosen
point without sleeping.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from hearthnet.blobs import BlobStore
from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.community.levels import Level
from hearthnet.config.embedding import OpenAIBackendConfig
from hearthnet.contracts import routing
from hearthnet.contracts.embed import Embedded, Embedder
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    Unauthorized,
)
from hearthnet.identity import Identity
from hearthnet.services.embedding import (
    EmbeddingConfig,
    EmbeddingService,
    OnnxEmbeddingBackend,
)
from hearthnet.services.embedding.onnx_backend import OnnxModel
from hearthnet.services.file.service import FileService
from hearthnet.services.rag.chunks import Chunk, chunk_id_for
from hearthnet.services.rag.ingest.embed import PAGES_AHEAD, EmbeddedDocument, embed_streamed
from hearthnet.services.rag.service import RagService, RagSettings
from hearthnet.services.rag.store import CorpusStore
from tests.openai_server import DIM, OpenAIEmbeddingServer
from tests.polling import wait_until
from tests.shared_data import PDF_DIR

MINILM = "all-MiniLM-L6-v2"
OTHER = "hashed-words-64"
TIMEOUT = 120.0

Frame = dict[str, Any]


@pytest.fixture
def other_server() -> Iterator[OpenAIEmbeddingServer]:
    server = OpenAIEmbeddingServer(OTHER)
    try:
        yield server
    finally:
        server.close()


class Ctx(CallContext):
    """A call as a handler sees it; ``on_frame`` runs (and may block) at each progress frame."""

    def __init__(
        self,
        capability: str,
        params: dict[str, Any],
        input: dict[str, Any],
        *,
        is_local: bool = True,
        on_frame: Callable[[Frame], Awaitable[None]] | None = None,
    ) -> None:
        self.capability = capability
        self.version = (1, 0)
        self.params = params
        self.input = input
        self.caller = "ed25519:self" if is_local else "ed25519:peer"
        self.caller_level = Level.TRUSTED
        self.is_local = is_local
        self.deadline = anyio.current_time() + TIMEOUT
        self.trace_id = "test"
        self.frames: list[Frame] = []
        self._on_frame = on_frame

    async def send(self, frame: Frame) -> None:
        self.frames.append(frame)
        if self._on_frame is not None:
            await self._on_frame(frame)

    async def receive(self) -> dict[str, Any] | None:
        return None


@dataclass
class Node:
    bus: CapabilityBus
    rag: RagService
    store: CorpusStore
    blobs: BlobStore
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    append_failures: list[BusError] = field(default_factory=list)

    def put(self, text: str) -> str:
        return self.blobs.put_bytes(text.encode()).doc_cid

    async def call(self, capability: str, ctx: Ctx) -> Any:
        reg = self.bus.registry.find_local(capability, (1, 0), ctx.params, remote_caller=not ctx.is_local)
        assert reg is not None, capability
        return await reg.handler(ctx)

    async def ingest(self, corpus: str, doc_cid: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        on_frame = kw.pop("on_frame", None)
        is_local = kw.pop("is_local", True)
        ctx = Ctx(
            "rag.ingest", {"corpus": corpus}, {"doc_cid": doc_cid, **kw}, is_local=is_local, on_frame=on_frame
        )
        result: tuple[dict[str, Any], dict[str, Any]] = await self.call("rag.ingest", ctx)
        return result

    async def query(self, corpus: str, **input: Any) -> dict[str, Any]:
        output, _ = await self.call("rag.query", Ctx("rag.query", {"corpus": corpus}, input))
        return dict(output)


@asynccontextmanager
async def node(
    root: Path,
    *,
    minilm: OnnxModel | None = None,
    other: OpenAIEmbeddingServer | None = None,
    accept_new_corpora: bool = True,
    find_event: Callable[[str, str], str | None] = lambda corpus, doc_cid: None,
    own_level: Level | None = Level.TRUSTED,
) -> AsyncIterator[Node]:
    """One node's bus with the file, embedding and rag services on ``root`` (reopened if it exists)."""
    identity = Identity.generate()
    bus = CapabilityBus(
        identity,
        level_of=lambda n: Level.ANCHOR if n == identity.node_id else None,
        community_id=lambda: "hc1:test",
    )
    routing.install(bus)  # the capability families' params rules, as a node gives them
    blobs = BlobStore(root / "blobs")
    files = FileService(bus=bus, store=blobs)
    backends = [OnnxEmbeddingBackend(minilm)] if minilm is not None else []
    openai = (
        ()
        if other is None
        else (OpenAIBackendConfig(base_url=other.url, model=OTHER, dim=DIM, max_tokens=256),)
    )
    embedding = EmbeddingService(EmbeddingConfig(in_process=False, openai=openai), backends=backends)
    store = CorpusStore(root / "rag")
    events: list[tuple[str, dict[str, Any]]] = []
    failures: list[BusError] = []

    async def append_event(event_type: str, data: dict[str, Any]) -> str:
        if failures:
            raise failures.pop(0)
        events.append((event_type, data))
        return f"ev{len(events)}"

    rag = RagService(
        bus=bus,
        store=store,
        blobs=blobs,
        settings=RagSettings(
            embedding_model=MINILM if minilm is not None else OTHER, accept_new_corpora=accept_new_corpora
        ),
        append_event=append_event,
        find_event=find_event,
        own_level=lambda: own_level,
    )
    n = Node(bus, rag, store, blobs, events, failures)
    await embedding.start()
    await rag.start()
    for service in (files, embedding, rag):
        for reg in service.registrations():
            bus.register(reg)
    try:
        yield n
    finally:
        await n.rag.stop()
        await embedding.stop()
        await files.stop()


def garden_text(topic: str, paragraphs: int = 6) -> str:
    body = "\n\n".join(
        f"Paragraph {i} about {topic}: the {topic} needs care in spring and autumn. " + "word " * 30
        for i in range(paragraphs)
    )
    return f"# Notes on {topic}\n\n{body}\n"


@pytest.mark.anyio
async def test_ingest_into_a_corpus_being_reindexed_is_refused_retryably_and_nothing_is_lost(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        for topic in ("roses", "tomatoes"):
            await n.ingest("house", n.put(garden_text(topic)), filename=f"{topic}.md")
        late = n.put(garden_text("boilers"))
        during: list[object] = []

        async def ingest_meanwhile(frame: Frame) -> None:
            if frame["stage"] == "reindex" and frame["current"] == 1:  # old documents being re-embedded
                try:
                    during.append(await n.ingest("house", late, filename="boilers.md"))
                except CapacityExceeded as exc:
                    during.append(exc)

        with anyio.fail_after(TIMEOUT):
            out = await n.call(
                "rag.reindex", Ctx("rag.reindex", {}, {"corpus": "house"}, on_frame=ingest_meanwhile)
            )
        assert out["docs"] == 2
        (refused,) = during
        assert isinstance(refused, CapacityExceeded), "an ingest acknowledged during a reindex was dropped"
        assert refused.code == "capacity_exceeded" and refused.retry_after_ms and refused.retry_after_ms > 0
        assert "being reindexed" in refused.message
        assert not n.store.has_document("house", late)
        output, _ = await n.ingest("house", late, filename="boilers.md")  # retried once it is done
        assert output["chunks_indexed"] > 0 and n.store.has_document("house", late)
        assert n.store.info("house").docs == 3


@pytest.mark.anyio
async def test_reindex_waits_for_an_ingest_already_running(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", n.put(garden_text("roses")), filename="roses.md")
        running = n.put(garden_text("boilers"))
        reindex_ctx: list[Ctx] = []
        reindex_out: list[dict[str, Any]] = []
        reindex_spoke = anyio.Event()

        async def on_reindex_frame(frame: Frame) -> None:
            reindex_spoke.set()

        async def reindex() -> None:
            ctx = Ctx("rag.reindex", {}, {"corpus": "house"}, on_frame=on_reindex_frame)
            reindex_ctx.append(ctx)
            reindex_out.append(await n.call("rag.reindex", ctx))

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:

                async def start_reindex_before_writing(frame: Frame) -> None:
                    if frame["stage"] == "write":  # embedded, about to be stored
                        tg.start_soon(reindex)
                        await reindex_spoke.wait()  # it has started: waiting, or done listing the documents

                await n.ingest("house", running, filename="boilers.md", on_frame=start_reindex_before_writing)

        assert reindex_ctx[0].frames[0] == {"stage": "wait", "current": 0, "total": 1}
        assert reindex_out == [{"corpus": "house", "docs": 2, "embedding_model": MINILM}]
        assert n.store.has_document("house", running), "the ingest finished during the reindex was dropped"


@pytest.mark.anyio
async def test_query_output_metadata_carries_the_chunk_id(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("roses"))
        await n.ingest("house", cid, filename="roses.md")
        out = await n.query("house", query="roses in spring", k=3)
        assert out["chunks"]
        for hit in out["chunks"]:
            md = hit["metadata"]
            assert md["chunk_id"] == chunk_id_for(cid, md["chunk_index"], md["char_start"], md["page"])
        again = await n.query("house", query="roses in spring", k=3, filter={"doc_cid": cid})
        assert [h["metadata"]["chunk_id"] for h in again["chunks"]] == [
            h["metadata"]["chunk_id"] for h in out["chunks"]
        ]
        with pytest.raises(BadRequest, match="'chunk_id' is reserved"):
            await n.ingest("house", n.put(garden_text("tulips")), metadata={"chunk_id": "mine"})


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["chroma:document", "#document", "$eq", "hn_corpus", "chunk_id"])
async def test_metadata_keys_chromadb_would_refuse_are_a_bad_request(
    tmp_path: Path, minilm: OnnxModel, key: str
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        with pytest.raises(BadRequest, match="metadata key"):
            await n.ingest("house", n.put(garden_text("roses")), metadata={key: "x"})
        assert n.store.corpora() == []


@pytest.mark.anyio
async def test_a_node_not_accepting_new_corpora_refuses_peers_creating_one(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm, accept_new_corpora=False) as n:
        ingest_params = [
            dict(r.descriptor.params) for r in n.bus.registry.local() if r.descriptor.name == "rag.ingest"
        ]
        assert ingest_params == [{"corpora": [], "accepts_new": False, "embedding_model": MINILM}]
        with pytest.raises(NotFound, match="accepts no new corpora"):
            await n.ingest("brand-new", n.put(garden_text("roses")), is_local=False)
        assert n.store.corpora() == []
        # The node's owner may still create corpora on it; peers may then add to them.
        await n.ingest("house", n.put(garden_text("roses")))
        output, _ = await n.ingest("house", n.put(garden_text("tulips")), is_local=False)
        assert output["chunks_indexed"] > 0 and n.store.info("house").docs == 2


@pytest.mark.anyio
async def test_whitespace_padded_text_is_ingested(tmp_path: Path, minilm: OnnxModel) -> None:
    table = "\n".join(f"row{i}" + " " * 400 + f"value{i}" for i in range(60))
    async with node(tmp_path, minilm=minilm) as n:
        output, meta = await n.ingest("house", n.put(table), filename="table.txt")
        assert output["chunks_indexed"] >= 4 and meta["truncated"] == 0
        hits = (await n.query("house", query="row7 value7", k=20))["chunks"]
        assert any("value7" in h["text"] for h in hits)


@pytest.mark.anyio
async def test_a_missed_ingest_event_is_emitted_as_stored(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("roses"))
        n.append_failures.append(InternalError("event log unavailable"))
        with pytest.raises(InternalError):
            await n.ingest("house", cid, filename="roses.md")  # stored, but no event
        assert n.store.has_document("house", cid) and n.events == []
        _, meta = await n.ingest("house", cid)  # a retry that gives neither title nor language
        assert meta["existing"] is True
        ((_, data),) = n.events
        assert (data["title"], data["language"]) == ("Notes on roses", "en")


@pytest.mark.anyio
async def test_health_never_names_the_personal_corpus(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("personal", n.put("My private diary entry about the garden. " * 20))
        await n.ingest("house", n.put(garden_text("roses")))
        assert n.rag.health()["corpora"] == ["house"]
        assert n.events and all(d["corpus"] != "personal" for _, d in n.events)


@pytest.mark.anyio
async def test_reindex_to_another_model_replaces_the_registration_and_keeps_metadata(
    tmp_path: Path, minilm: OnnxModel, other_server: OpenAIEmbeddingServer
) -> None:
    layer = {"layer": "household", "year": 2024}
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("c1", n.put(garden_text("roses", 12)), filename="roses.md", metadata=layer)
        before = await n.query("c1", query="roses", filter={"layer": "household", "year": {"$gte": 2020}})
        assert before["chunks"]
    async with node(tmp_path, other=other_server) as n:
        with pytest.raises(NotFound, match="reindex"):
            await n.query("c1", query="roses")
        out = await n.call("rag.reindex", Ctx("rag.reindex", {}, {"corpus": "c1"}))
        assert out == {"corpus": "c1", "docs": 1, "embedding_model": OTHER}
        regs = [dict(p.descriptor.params) for p in n.bus.providers("rag.query", (1, 0), {"corpus": "c1"})]
        chunks = n.store.info("c1").chunks
        assert regs == [{"corpus": "c1", "embedding_model": OTHER, "k_max": 20, "docs": 1, "chunks": chunks}]
        after = await n.query("c1", query="roses", filter={"layer": "household", "year": {"$gte": 2020}})
        assert len(after["chunks"]) == len(before["chunks"])
        assert all(h["metadata"]["layer"] == "household" for h in after["chunks"])
        assert n.store.documents("c1")[0]["metadata"] == layer  # the file name is doc_filename


@pytest.mark.anyio
async def test_concurrent_ingests_of_one_document_index_it_once_and_leave_no_lock_behind(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("tulips"))
        results: list[Any] = []

        async def one() -> None:
            results.append(await n.ingest("house", cid, filename="tulips.md"))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
        assert len(n.store.documents("house")) == 1
        assert (
            n.rag._documents._locks == {}
        )  # one lock per document being ingested, not per document ever seen


@pytest.mark.anyio
async def test_a_query_does_not_wait_behind_writes_holding_every_write_thread(
    tmp_path: Path, minilm: OnnxModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", n.put(garden_text("roses")), filename="roses.md")
        release = threading.Event()
        writing = threading.Semaphore(0)
        real_add = n.store.add_documents

        def slow_add(*args: Any, **kwargs: Any) -> list[bool]:
            writing.release()
            release.wait(TIMEOUT)  # a long ChromaDB write (a large document on a slow disk)
            return real_add(*args, **kwargs)

        monkeypatch.setattr(n.store, "add_documents", slow_add)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                try:
                    for topic in ("tulips", "boilers"):  # as many writes as the store has threads
                        tg.start_soon(
                            lambda t=topic: n.ingest("house", n.put(garden_text(t)), filename=f"{t}.md")
                        )
                    for _ in range(2):
                        await anyio.to_thread.run_sync(writing.acquire)
                    with anyio.fail_after(20):  # on the shared limiter it waited for `release`
                        out = await n.query("house", query="roses in spring", k=3)
                    assert out["chunks"] and not release.is_set()
                finally:
                    release.set()  # the writes go on (and a failure above does not wait for them)
        assert n.store.info("house").docs == 3


class RecordingEmbedder(Embedder):
    """The real embedder, with its calls recorded; a call may be held until the test lets it go."""

    def __init__(self, bus: CapabilityBus) -> None:
        super().__init__(bus, MINILM, TIMEOUT)
        self.sizes: list[int] = []
        self.running = 0
        self.most_running = 0
        self.gates: dict[int, anyio.Event] = {}  # call number -> held until set
        self.started: dict[int, anyio.Event] = {}
        self.fail: set[int] = set()

    async def embed(self, texts: Sequence[str], *, bulk: bool = False) -> Embedded:
        number = len(self.sizes)
        self.sizes.append(len(texts))
        self.started.setdefault(number, anyio.Event()).set()
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if number in self.gates:
                await self.gates[number].wait()
            if number in self.fail:
                raise Partition("the embedder went away")
            return await super().embed(texts, bulk=bulk)
        finally:
            self.running -= 1


@pytest.mark.anyio
async def test_embedding_starts_on_the_chunks_read_so_far_and_never_sends_more_than_a_batch(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The embedder is not kept waiting for a full batch of 32 while chunks are ready, the next
    call goes out while one is in flight (never more than two), and vectors keep the chunks'
    order when the later call ends first."""
    async with node(tmp_path, minilm=minilm) as n:
        embedder = RecordingEmbedder(n.bus)
        chunks = [Chunk(f"c{i}", f"chunk {i} about compost and {i % 7} worms", {}) for i in range(43)]
        send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)
        frames: list[Frame] = []
        first, go_on = anyio.Event(), anyio.Event()
        embedder.gates[1] = anyio.Event()  # the 32-chunk call is held until the 8-chunk one ran
        embedder.started[2] = anyio.Event()

        async def progress(frame: Frame) -> None:
            frames.append(frame)
            first.set()
            await go_on.wait()  # the first call's task pauses here while the test reads on

        result: list[EmbeddedDocument] = []

        async def embed() -> None:
            async with receive:
                result.append(await embed_streamed(embedder, receive, progress))

        async with anyio.create_task_group() as tg:
            tg.start_soon(embed)
            await send.send(chunks[:3])  # a first page: 3 chunks, and the reader still busy
            with anyio.fail_after(60):
                await first.wait()  # ... embedded before any more arrive
            assert frames == [{"stage": "embed", "current": 3, "total": 3}]
            await send.send(chunks[3:20])
            await send.send(chunks[20:])  # 40 ready at once: a full batch of 32, then 8
            await send.aclose()
            go_on.set()
            with anyio.fail_after(60):
                await embedder.started[2].wait()  # sent while the 32 are still in flight
                await wait_until(lambda: len(frames) == 2)  # the 8 are done first
            embedder.gates[1].set()
        assert embedder.sizes == [3, 32, 8] and embedder.most_running == 2
        assert [f["current"] for f in frames] == [3, 11, 43]
        assert all(f["total"] == 43 for f in frames[1:])
        direct = (await Embedder(n.bus, MINILM, TIMEOUT).embed([c.text for c in chunks])).vectors
        assert result[0].vectors.shape == (43, direct.shape[1])
        assert ((result[0].vectors @ direct.T).argmax(axis=1) == np.arange(43)).all()  # in order


@pytest.mark.anyio
async def test_a_failed_embedding_call_ends_the_other_in_flight_and_is_raised_as_itself(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        embedder = RecordingEmbedder(n.bus)
        embedder.gates[0] = anyio.Event()  # never set: only cancellation ends this call
        embedder.fail.add(1)
        send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)
        chunks = [Chunk(f"c{i}", f"chunk {i} about compost", {}) for i in range(40)]
        await send.send(chunks)  # 32 + 8: two calls at once
        await send.aclose()
        with anyio.fail_after(60), pytest.raises(Partition, match="went away"):
            async with receive:
                await embed_streamed(embedder, receive, None)
        assert embedder.sizes == [32, 8] and embedder.running == 0


@pytest.mark.anyio
async def test_announcing_a_corpus_never_blocks_the_event_loop_on_the_store_lock(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """A write may hold the store lock for long (a reindex's swap, a ChromaDB server call): the
    registrations an ingest updates at its end read the store in a thread, never on the loop."""
    async with node(tmp_path, minilm=minilm) as n:
        n.store.create_corpus("fresh", embedding_model=MINILM, dim=384)
        taken, release = threading.Event(), threading.Event()
        held = [False]

        def hold() -> None:
            with n.store._lock:
                held[0] = True
                taken.set()
                release.wait(5)
                held[0] = False

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait(5)
        seen: list[bool] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(n.rag._offers.announce, "fresh")
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
                seen.append(held[0])  # the loop turns while the lock is still held
            release.set()
        holder.join(5)
        assert seen == [True] * 5
        assert "fresh" in n.rag.health()["corpora"]


@pytest.mark.anyio
async def test_a_caller_walking_away_during_the_write_leaves_the_document_registered_and_announced(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The write runs in a thread the caller cannot stop; its registration and event came after an
    await that the caller's cancellation did stop: stored, unreachable by rag.query, unannounced."""
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("tulips"))
        write = n.store.add_documents
        with anyio.CancelScope() as scope:

            def walk_away_meanwhile(*args: Any, **kw: Any) -> list[bool]:
                anyio.from_thread.run_sync(scope.cancel)  # the deadline passes during the write
                return write(*args, **kw)

            n.store.add_documents = walk_away_meanwhile  # type: ignore[method-assign]
            await n.ingest("garden", cid, filename="tulips.md")
        assert n.store.has_document("garden", cid)
        assert [data["doc_cid"] for _, data in n.events] == [cid]
        hits = (await n.query("garden", query="tulips in spring", k=1))["chunks"]
        assert hits[0]["metadata"]["doc_cid"] == cid


@pytest.mark.anyio
async def test_a_repeat_ingest_registers_a_corpus_whose_first_ingest_stopped_after_the_write(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("lilies"))
        announce = n.rag._offers.announce
        calls = 0

        async def fails_once(corpus: str) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise InternalError("registration failed")
            await announce(corpus)

        n.rag._offers.announce = fails_once  # type: ignore[method-assign]
        with pytest.raises(InternalError):
            await n.ingest("pond", cid, filename="lilies.md")
        assert n.store.has_document("pond", cid) and n.rag._offers.query_params("pond") is None
        _, meta = await n.ingest("pond", cid)
        assert meta["existing"] is True and n.rag._offers.query_params("pond") is not None
        assert [data["doc_cid"] for _, data in n.events] == [cid]
        assert (await n.query("pond", query="lilies", k=1))["chunks"][0]["metadata"]["doc_cid"] == cid


@pytest.mark.anyio
async def test_an_input_key_that_is_not_a_string_is_a_bad_request(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("garden", n.put(garden_text("ferns")), filename="ferns.md")
        ctx = Ctx("rag.query", {"corpus": "garden"}, {"query": "x", b"k": 1, 7: 2})  # type: ignore[dict-item]
        with pytest.raises(BadRequest, match=r"unknown rag\.query input field"):
            await n.call("rag.query", ctx)


@pytest.mark.anyio
async def test_a_repeat_ingest_looks_its_event_up_off_the_event_loop(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The lookup scans every ingest event of the community's log; on the event loop, re-running
    a folder ingest stalled every query of the node for N x M event decodes."""
    looked_up_on: list[int] = []

    def find_event(corpus: str, doc_cid: str) -> str | None:
        looked_up_on.append(threading.get_ident())
        return "ev-old"

    async with node(tmp_path, minilm=minilm, find_event=find_event) as n:
        cid = n.put(garden_text("moss"))
        await n.ingest("garden", cid, filename="moss.md")
        _, meta = await n.ingest("garden", cid)
        assert meta["existing"] is True and meta["ingest_event_id"] == "ev-old"
    assert looked_up_on and threading.get_ident() not in looked_up_on


@pytest.mark.anyio
async def test_an_ingest_waiting_for_the_embedder_does_not_stop_another_from_reading(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The reader held the one CPU slot for its whole document, waits for the embedder included:
    a small file behind a long PDF sat in its 'read' stage until that PDF was nearly embedded."""
    from tests.shared_data import PDF_DIR

    async with node(tmp_path, minilm=minilm) as n:
        long_pdf = n.blobs.put_bytes((PDF_DIR / "en_walden_thoreau_249p.pdf").read_bytes()).doc_cid
        small = n.put(garden_text("basil"))
        paused, resume = anyio.Event(), anyio.Event()

        async def hold_embedding(frame: Frame) -> None:
            if frame.get("stage") == "embed":
                paused.set()
                await resume.wait()  # the long PDF's embedding stops; its reader fills its buffer

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: n.ingest("books", long_pdf, filename="walden.pdf", on_frame=hold_embedding))
            with anyio.fail_after(60):
                await paused.wait()
            try:
                with anyio.fail_after(60):
                    output, _ = await n.ingest("garden", small, filename="basil.md")
                assert output["chunks_indexed"] >= 1
            finally:
                tg.cancel_scope.cancel()  # the long PDF's caller walks away: nothing of it is kept
                resume.set()
        assert n.store.has_document("garden", small) and "books" not in n.store.corpora()


@pytest.mark.anyio
async def test_two_announces_finishing_in_the_other_order_leave_the_newest_corpus_list(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("alpha", n.put(garden_text("sage")), filename="sage.md")
        real = n.store.corpora
        first_read, release = threading.Event(), threading.Event()
        reads = 0

        def corpora() -> list[str]:
            nonlocal reads
            reads += 1
            held = real()
            if reads == 1:  # the first announce read its list; it resumes after the second
                first_read.set()
                assert release.wait(30)
            return held

        n.store.corpora = corpora  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(n.rag._offers.announce, "alpha")
            await anyio.to_thread.run_sync(first_read.wait, 30)
            n.store.create_corpus("beta", embedding_model=MINILM, dim=384)
            tg.start_soon(n.rag._offers.announce, "beta")
            await wait_until(lambda: reads >= 2 or n.rag._offers._lock.statistics().tasks_waiting == 1)
            release.set()
        assert n.rag._offers._ingest_params is not None and n.rag._offers._ingest_params["corpora"] == [
            "alpha",
            "beta",
        ]


@pytest.mark.anyio
async def test_a_node_that_is_not_trusted_still_ingests_into_its_personal_corpus(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm, own_level=Level.MEMBER) as n:
        cid = n.put(garden_text("ferns"))
        with pytest.raises(Unauthorized, match="an anchor can promote it"):
            await n.ingest("house", cid)  # announced to the community: needs trusted
        output, _ = await n.ingest("personal", cid)  # never announced: this node's own business
        assert output["chunks_indexed"] > 0 and n.events == []


@pytest.mark.anyio
async def test_a_node_outside_its_community_is_not_told_to_get_promoted(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """Never joined or revoked: promotion is no remedy (a revocation is permanent)."""
    async with node(tmp_path, minilm=minilm, own_level=None) as n:
        cid = n.put(garden_text("ferns"))
        with pytest.raises(Unauthorized, match="not a member of its community") as refused:
            await n.ingest("house", cid)
        assert "promote" not in str(refused.value)


def _pinned(n: Node, cid: str) -> bool:
    (info,) = [b for b in n.blobs.list() if b.doc_cid == cid]
    return info.pinned


@pytest.mark.anyio
async def test_an_indexed_document_keeps_its_source_and_a_refused_one_holds_nothing(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        good = n.put(garden_text("tulips"))  # imported unpinned, as `hearthnet ingest` does
        bad = n.blobs.put_bytes(b"%PDF-1.4 not really a pdf").doc_cid
        await n.ingest("house", good)
        with pytest.raises(BadRequest):
            await n.ingest("house", bad)
        assert _pinned(n, good)  # `rag reindex` re-embeds from it: garbage collection must not take it
        assert not _pinned(n, bad)


@pytest.mark.anyio
@pytest.mark.parametrize("language", ["e\x9bn", "en\u202e", "en us", "x" * 17, ""])
async def test_a_language_that_is_not_a_short_code_is_a_bad_request(
    tmp_path: Path, minilm: OnnxModel, language: str
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("moss"))
        with pytest.raises(BadRequest, match="language"):
            await n.ingest("house", cid, language=language)
        output, _ = await n.ingest("house", cid, language="auto")  # detected
        assert n.events[-1][1]["language"] == "en" and output["chunks_indexed"] > 0


@pytest.mark.anyio
async def test_a_source_that_cannot_be_pinned_does_not_fail_an_ingest_that_is_done(
    tmp_path: Path, minilm: OnnxModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("lilies"))

        def broken_pin(doc_cid: str) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(n.blobs, "pin", broken_pin)
        output, meta = await n.ingest("house", cid)  # stored and announced: the answer says so
        assert output["chunks_indexed"] > 0 and meta["ingest_event_id"] and n.store.has_document("house", cid)


@pytest.mark.anyio
async def test_embedding_calls_answered_with_different_sizes_are_an_internal_error(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """Two providers of one model name with different dimensions (a misconfigured one) used to
    end the ingest in numpy's ValueError; the caller gets internal_error naming the model."""

    class TwoSizes(Embedder):
        async def embed(self, texts: Sequence[str], *, bulk: bool = False) -> Embedded:
            answer = await super().embed(texts, bulk=bulk)
            vectors = answer.vectors if len(texts) == 32 else answer.vectors[:, :8]
            return Embedded(vectors, answer.tokens, answer.truncated, answer.provider)

    async with node(tmp_path, minilm=minilm) as n:
        send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)
        await send.send([Chunk(f"c{i}", f"chunk {i} about compost", {}) for i in range(40)])  # 32 + 8
        await send.aclose()
        with anyio.fail_after(60), pytest.raises(InternalError, match="different sizes"):
            async with receive:
                await embed_streamed(TwoSizes(n.bus, MINILM, TIMEOUT), receive, None)


@pytest.mark.anyio
async def test_a_deleted_document_is_wholly_gone_announced_and_its_source_unpinned(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        keep, gone = n.put(garden_text("roses")), n.put(garden_text("boilers"))
        await n.ingest("house", keep, filename="roses.md")
        await n.ingest("house", gone, filename="boilers.md")
        before = n.rag._offers._queries["house"]["chunks"]
        out, meta = await n.call("rag.delete", Ctx("rag.delete", {"corpus": "house"}, {"doc_cid": gone}))
        assert out["chunks_removed"] > 0 and meta["already_deleted"] is False
        assert n.events[-1] == ("rag.document.deleted", {"corpus": "house", "doc_cid": gone})
        assert not n.store.has_document("house", gone) and n.store.pending_deletions() == []
        hits = await n.query("house", query="boilers need care in spring", k=20)
        assert {h["metadata"]["doc_cid"] for h in hits["chunks"]} == {keep}
        assert not _pinned(n, gone) and _pinned(n, keep)
        # the routing counts follow the delete
        assert n.rag._offers._queries["house"]["chunks"] == before - out["chunks_removed"]
        assert n.rag._offers._queries["house"]["docs"] == 1
        # nothing left to delete and nothing announced (find_event: no ingest in effect)
        with pytest.raises(NotFound, match="hearthnet docs"):
            await n.call("rag.delete", Ctx("rag.delete", {"corpus": "house"}, {"doc_cid": gone}))
        # ingested again: a new ingest, a new event, its source pinned again
        _, meta = await n.ingest("house", gone, filename="boilers.md")
        assert not meta.get("existing") and n.events[-1][0] == "rag.document.ingested"
        assert _pinned(n, gone)


@pytest.mark.anyio
async def test_a_delete_whose_event_was_never_appended_is_announced_at_the_next_start(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The node dies between the store's delete and the event: the marker committed with the delete
    makes the next start append it (if the ingest is still in effect), and unpin the source."""
    async with node(tmp_path, minilm=minilm) as n:
        doc = n.put(garden_text("tulips"))
        await n.ingest("garden", doc, filename="tulips.md")
        n.store.delete_document("garden", doc, announce=True)  # what a kill right after leaves
    async with node(tmp_path, minilm=minilm, find_event=lambda corpus, cid: "ev-ingest") as n:
        assert n.events == [("rag.document.deleted", {"corpus": "garden", "doc_cid": doc})]
        assert n.store.pending_deletions() == [] and not _pinned(n, doc)
        assert n.rag._offers._queries["garden"]["docs"] == 0


@pytest.mark.anyio
async def test_a_node_that_is_not_trusted_is_named_when_it_refuses_to_announce(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm, own_level=Level.MEMBER) as n:
        with pytest.raises(Unauthorized) as refused:
            await n.ingest("house", n.put(garden_text("roses")))
        assert n.bus.node_id in refused.value.message and "member" in refused.value.message
        assert "this node" not in refused.value.message


@pytest.mark.anyio
async def test_a_filter_on_a_field_no_document_has_is_a_warning(tmp_path: Path, minilm: OnnxModel) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", n.put(garden_text("roses")), filename="roses.md", metadata={"shelf": 2})
        _, meta = await n.call(
            "rag.query", Ctx("rag.query", {"corpus": "house"}, {"query": "roses", "filter": {"pgae": 1}})
        )
        (warning,) = meta["warnings"]
        assert "'pgae'" in warning and "page" in warning and "shelf" in warning
        _, meta = await n.call(
            "rag.query", Ctx("rag.query", {"corpus": "house"}, {"query": "roses", "filter": {"shelf": 2}})
        )
        assert "warnings" not in meta
        with pytest.raises(BadRequest, match=r"\$and"):
            await n.query("house", query="roses", filter={"page": {"$gte": 1, "$lte": 2}})


@pytest.mark.anyio
async def test_documents_are_listed_with_file_name_pages_and_who_ingested_them(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        pdf = n.blobs.put_bytes((PDF_DIR / "en_paper_creativity_in_ml.pdf").read_bytes()).doc_cid
        await n.ingest("papers", pdf, filename="/home/me/papers/creativity.pdf")
        for topic in ("roses", "tulips"):
            await n.ingest("papers", n.put(garden_text(topic)), filename=f"{topic}.md")
        ctx = Ctx("rag.list_documents", {"corpus": "papers"}, {"limit": 2})
        first, _ = await n.call("rag.list_documents", ctx)
        ctx = Ctx("rag.list_documents", {"corpus": "papers"}, {"limit": 2, "after": first["next"]})
        rest, _ = await n.call("rag.list_documents", ctx)
        assert first["total"] == 3 and len(first["documents"]) == 2 and rest["next"] is None
        docs = {d["filename"]: d for d in first["documents"] + rest["documents"]}
        assert set(docs) == {"creativity.pdf", "roses.md", "tulips.md"}  # folders dropped
        assert docs["creativity.pdf"]["pages"] > 1 and docs["roses.md"]["pages"] == 1
        assert docs["creativity.pdf"]["ingested_by"] == "ed25519:self"
        hit = (await n.query("papers", query="creativity in machine learning", k=1))["chunks"][0]
        assert hit["metadata"]["doc_filename"] == "creativity.pdf"


@pytest.mark.anyio
async def test_a_document_gone_from_the_store_but_still_announced_is_announced_as_deleted(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """A store that lost a document (or a delete whose event was never appended): deleting it again
    appends the deletion, so the community's view follows the store; nothing else changes."""
    lost = "blake3:" + "ab" * 32
    async with node(tmp_path, minilm=minilm, find_event=lambda c, d: "ev-old" if d == lost else None) as n:
        await n.ingest("house", n.put(garden_text("roses")), filename="roses.md")
        out, meta = await n.call("rag.delete", Ctx("rag.delete", {"corpus": "house"}, {"doc_cid": lost}))
        assert out == {"doc_cid": lost, "chunks_removed": 0} and meta["already_deleted"] is True
        assert n.events[-1] == ("rag.document.deleted", {"corpus": "house", "doc_cid": lost})
        assert n.store.info("house").docs == 1 and n.store.pending_deletions() == []
