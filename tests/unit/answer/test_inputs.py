"""``answer.ask``'s inputs for the open doors: archives, given history, a model; archive passages as hits."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.answer.archives import archive_keys, retrieve_archives
from hearthnet.answer.compose import Ask
from hearthnet.answer.prompt import Turn
from hearthnet.answer.service import parse_ask
from hearthnet.bus.context import CallResult
from hearthnet.config import AnswerConfig
from hearthnet.errors import BadRequest, Partition

ENTRY = {"name": "AIS", "collection_name": "repo_a", "chromadb_url": "http://c:8000", "embedding_model": "m1"}


def test_archives_history_and_model_are_read_and_bounded() -> None:
    ask = parse_ask(
        {
            "question": "q",
            "archives": [ENTRY],
            "history": [{"question": "q0", "answer": "a0"}],
            "model": "chat-1",
        },
        AnswerConfig(),
    )
    assert ask.archives == (ENTRY,) and ask.history == (Turn("q0", "a0"),) and ask.model == "chat-1"
    assert not ask.cacheable and not Ask("q", history=()).cacheable and Ask("q").cacheable
    for bad, named in [
        ({"archives": []}, "archives"),
        ({"archives": [ENTRY] * 17}, "archives"),
        ({"archives": [{"collection_name": "x"}]}, r"archives\[0\]"),
        ({"archives": [ENTRY], "no_rag": True}, "no_rag"),
        ({"history": [{"question": "q"}]}, r"history\[0\]"),
        ({"history": [{"question": "q", "answer": "a"}], "session": "s1"}, "exclude"),
        ({"history": [{"question": "q" * 300_000, "answer": "a" * 200_000}]}, "characters"),
        ({"model": ""}, "model"),
        ({"model": 3}, "model"),
    ]:
        with pytest.raises(BadRequest, match=named):
            parse_ask({"question": "q", **bad}, AnswerConfig())


class FakeBus:
    """Answers ``rag.search_archives`` with a fixed outcome (the composer's side of the call)."""

    node_id = "ed25519:me"

    def __init__(self, output: dict[str, Any] | Exception) -> None:
        self.output = output
        self.inputs: list[dict[str, Any]] = []

    async def call(self, capability: str, version: Any = (1, 0), **kw: Any) -> CallResult:
        assert capability == "rag.search_archives"
        self.inputs.append(kw["input"])
        if isinstance(self.output, Exception):
            raise self.output
        return CallResult(self.output, {}, provider="ed25519:me")


def outcome(*results: dict[str, Any], statuses: tuple[str, ...] = ("ok", "ok")) -> dict[str, Any]:
    return {
        "status": "ok",
        "merge": "rrf",
        "results": list(results),
        "archives": [
            {"name": n, "collection_name": c, "status": s, "route": "direct", "hits": 0}
            | ({"error": {"error": "partition", "message": "down"}} if s != "ok" else {})
            for (n, c), s in zip([("AIS", "repo_a"), ("AIS", "repo_b")], statuses, strict=True)
        ],
    }


def passage(collection: str, chunk_id: str, score: float, **metadata: Any) -> dict[str, Any]:
    return {
        "rank": 1,
        "archive": "AIS",
        "collection_name": collection,
        "chunk_id": chunk_id,
        "score": score,
        "fused": 0.1,
        "text": f"text of {chunk_id}",
        "metadata": {"layer": "chunk", **metadata},
    }


@pytest.mark.anyio
async def test_archive_passages_become_hits_of_their_archive() -> None:
    second = {**ENTRY, "collection_name": "repo_b", "embedding_model": "m2"}
    assert archive_keys([ENTRY, second]) == ["archive:AIS", "archive:AIS (repo_b)"]
    bus = FakeBus(
        outcome(
            passage("repo_a", "doc1:chunk:3", 0.7, page=4, title="Audit Manual"),
            passage("repo_b", "doc2:chunk:1", 0.6),
            {"archive": "AIS", "chunk_id": 5},  # malformed: dropped
            statuses=("ok", "unavailable"),
        )
    )
    results = await retrieve_archives(bus, "question", [ENTRY, second], k=7, timeout=5.0)  # type: ignore[arg-type]
    assert bus.inputs[0] == {
        "query": "question",
        "top_k": 7,
        "rag_config": {"archives": [ENTRY, second]},
        "format": "json",
    }
    first, other = results["archive:AIS"], results["archive:AIS (repo_b)"]
    assert first.status == "ok" and other.status == "unavailable" and other.code == "partition"
    hit = first.hits[0]
    assert (hit.chunk_id, hit.corpus, hit.embedding_model, hit.page, hit.file) == (
        "doc1:chunk:3",
        "AIS",
        "m1",
        4,
        "Audit Manual",
    )
    assert other.hits[0].file == "AIS" and other.hits[0].embedding_model == "m2"  # no title: the archive


@pytest.mark.anyio
async def test_a_malformed_entry_fails_the_ask_and_other_failures_leave_the_archives_out() -> None:
    with pytest.raises(BadRequest, match="collection_name"):
        await retrieve_archives(
            FakeBus(BadRequest("rag_config.archives[0].collection_name must be …")),  # type: ignore[arg-type]
            "q",
            [ENTRY],
            k=5,
            timeout=5.0,
        )
    down = await retrieve_archives(FakeBus(Partition("x")), "q", [ENTRY], k=5, timeout=5.0)  # type: ignore[arg-type]
    assert down["archive:AIS"].status == "unavailable" and down["archive:AIS"].code == "partition"
