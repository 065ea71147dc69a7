"""``rag.ingest {documents}`` and batched query embedding on one in-process node (real bus, MiniLM,
ChromaDB and blob store: the fixtures of ``test_service``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.contracts.rag import INGESTED
from hearthnet.errors import BadRequest
from hearthnet.services.embedding.onnx_backend import OnnxModel
from tests.unit.services.rag.test_service import Ctx, _pinned, garden_text, node


@pytest.mark.anyio
async def test_a_batch_is_embedded_together_written_once_and_answered_per_document(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        old = n.put(garden_text("roses"))
        await n.ingest("house", old)
        good = [n.put(garden_text(t)) for t in ("tulips", "beans", "apples")]
        bad = n.blobs.put_bytes(b"%PDF-1.4 not really a pdf").doc_cid
        writes: list[int] = []
        real = n.store._write_batch

        def counted(col: Any, ids: list[str], *rest: Any) -> None:
            writes.append(len(ids))
            real(col, ids, *rest)

        n.store._write_batch = counted  # type: ignore[method-assign]
        order = [good[0], bad, old, good[1], good[2]]
        docs = [{"doc_cid": c, "filename": f"{i}.txt"} for i, c in enumerate(order)]
        ctx = Ctx("rag.ingest", {"corpus": "house"}, {"documents": docs})
        output, meta = await n.call("rag.ingest", ctx)
        got = output["documents"]
        assert [d["doc_cid"] for d in got] == order
        assert [d["ok"] for d in got] == [True, False, True, True, True]
        assert got[1]["error"] == "bad_request" and got[1]["message"]
        assert got[2]["existing"] is True and not any(got[i]["existing"] for i in (0, 3, 4))
        new_chunks = sum(got[i]["chunks_indexed"] for i in (0, 3, 4))
        assert len(writes) == 1 and writes[0] == new_chunks  # one ChromaDB write for the three
        assert output["chunks_indexed"] == new_chunks + got[2]["chunks_indexed"]
        assert meta["corpus"] == "house"
        ingested = [d["doc_cid"] for t, d in n.events if t == "rag.document.ingested"]
        assert ingested[-3:] == good and bad not in ingested  # one event per new document
        assert all(_pinned(n, c) for c in good) and not _pinned(n, bad)
        hits = await n.query("house", query="when do beans need care", k=3)
        assert {h["metadata"]["doc_cid"] for h in hits["chunks"]} <= set(good) | {old}
        listed = {d["doc_cid"]: d["filename"] for d in n.store.documents("house")}
        assert listed[good[1]] == "3.txt"


@pytest.mark.anyio
async def test_a_single_document_is_a_batch_of_one(
    tmp_path: Path, minilm: OnnxModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rag.ingest {doc_cid}`` takes the batch's path (one way in): read and embedded as a batch of
    one, written and announced as a batch's document is, its read failure raised as itself."""
    from hearthnet.services.rag.ingest import flow

    batches: list[int] = []
    real = flow.read_and_embed_many

    async def counted(inputs: Any, **kw: Any) -> Any:
        batches.append(len(inputs))
        return await real(inputs, **kw)

    monkeypatch.setattr(flow, "read_and_embed_many", counted)
    async with node(tmp_path, minilm=minilm) as n:
        alone = n.put(garden_text("tulips"))
        output, meta = await n.ingest("house", alone, filename="tulips.txt")
        assert batches == [1]
        assert output["doc_cid"] == alone and output["chunks_indexed"] >= 1 and output["ocr_pages"] == []
        assert (
            meta["truncated"] == 0 and meta["pages"] == 1 and meta["embedding_model"] == n.rag._embedder.model
        )
        assert meta["ingest_event_id"] and [d["doc_cid"] for t, d in n.events if t == INGESTED] == [alone]
        together = n.put(garden_text("beans"))
        docs = {"documents": [{"doc_cid": together, "filename": "beans.txt"}]}
        batch, _ = await n.call("rag.ingest", Ctx("rag.ingest", {"corpus": "house"}, docs))
        assert batches == [1, 1]
        (entry,) = batch["documents"]
        assert set(entry) == {*output, "ok", "existing", "ingest_event_id"}  # the same answer, per document
        again, meta = await n.ingest("house", alone)
        assert meta["existing"] is True and again["chunks_indexed"] == output["chunks_indexed"]
        assert batches == [1, 1]  # a stored document is repaired, never read again
        bad = n.blobs.put_bytes(b"%PDF-1.4 not really a pdf").doc_cid
        with pytest.raises(BadRequest):
            await n.ingest("house", bad)
        assert batches == [1, 1, 1]


@pytest.mark.anyio
async def test_a_batch_naming_one_document_twice_or_too_many_is_a_bad_request(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        cid = n.put(garden_text("tulips"))
        twice, too_many = [{"doc_cid": cid}, {"doc_cid": cid}], [{"doc_cid": cid}] * 65
        for documents in (twice, [], too_many, [{"doc_cid": 3}]):
            with pytest.raises(BadRequest):
                await n.call("rag.ingest", Ctx("rag.ingest", {"corpus": "house"}, {"documents": documents}))
        assert "house" not in n.store.corpora()


@pytest.mark.anyio
async def test_concurrent_queries_are_embedded_together_and_each_gets_its_own_answer(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with node(tmp_path, minilm=minilm) as n:
        topics = ["tulips", "beans", "apples", "roses", "garlic", "onions", "peas", "plums"]
        for t in topics:
            await n.ingest("house", n.put(garden_text(t, paragraphs=1)))
        alone = {t: (await n.query("house", query=f"notes on {t}", k=1))["chunks"][0] for t in topics}
        embedder = n.rag._query_embedder
        before = embedder.calls
        together: dict[str, Any] = {}

        async def ask(t: str) -> None:
            together[t] = (await n.query("house", query=f"notes on {t}", k=1))["chunks"][0]

        async with anyio.create_task_group() as tg:
            for t in topics * 2:
                tg.start_soon(ask, t)
        assert embedder.calls - before < len(topics) * 2  # batched, not one call per question
        for t in topics:
            assert together[t]["metadata"]["doc_cid"] == alone[t]["metadata"]["doc_cid"]
            assert together[t]["score"] == pytest.approx(alone[t]["score"], abs=1e-4)


@pytest.mark.anyio
async def test_a_question_that_would_wait_past_the_budget_is_refused_at_once_with_a_hint(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    from hearthnet.errors import CapacityExceeded
    from hearthnet.services.rag.search.query_embedder import QueryEmbedder

    async with node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", n.put(garden_text("tulips", paragraphs=1)))
        strict = QueryEmbedder(n.rag._embedder, max_batch=1, in_flight=1, wait_budget=1e-6)
        n.rag._query_embedder = strict
        await n.query("house", query="tulips")  # the embedding rate is known from here
        answered: list[str] = []
        refused: list[CapacityExceeded] = []

        async def ask(i: int) -> None:
            try:
                await n.query("house", query=f"when do tulips {i} need care")
                answered.append(f"q{i}")
            except CapacityExceeded as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(ask, i)
        # one runs, one waits within the budget, the rest are refused at once, each with a hint
        assert len(answered) == 2 and len(refused) == 3
        assert all(exc.retry_after_ms is not None and exc.retry_after_ms >= 50 for exc in refused)
