"""``answer.ask`` on one in-process node with the real MiniLM, ChromaDB and RAG over the demo PDFs.

No ``llm.chat`` provider is registered here, so answers are extractive (what
``make demo`` shows by default); generated answers are in
``answer/test_generated.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pypdf
import pytest
from structlog.testing import capture_logs

from hearthnet.answer.compose import NO_SEARCH, NOT_SEARCHED, should_skip
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.config import AnswerConfig
from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.embedding.onnx_backend import OnnxModel
from tests.answer_harness import DEMO, MINILM, AnswerNode, answer_node, linked, new_bus
from tests.openai_server import OpenAIEmbeddingServer
from tests.unit.answer.test_cache import Clock

BOILER = "When is the gas boiler serviced, and by whom?"
CITATION = re.compile(r"\[([^\[\]#]+)#([0-9a-f]{32})\]")


async def demo_node(n: AnswerNode) -> None:
    await n.ingest("house", "heating_handbook.pdf")
    await n.ingest("house", "garden_and_seeds.pdf")
    await n.ingest("personal", "solar_and_battery.pdf")


@pytest.mark.anyio
async def test_without_a_language_model_the_answer_quotes_the_most_similar_sentences_cited(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await demo_node(n)
        asked = await n.ask(BOILER)
    out = asked.output
    assert out["mode"] == "extractive" and out["meta"]["extractive_ranking"] == "embedding"
    lines = out["answer"].split("\n")
    assert lines[0] == AnswerConfig().extractive_header
    assert "serviced every year in early October by a registered engineer" in lines[1]
    # the sentences about the boiler (a long one is also scored by its leading clause, which lifts the
    # pressure-gauge one among them); the next best (a gas emergency) is too far below them
    assert 1 + 3 <= len(lines) <= 1 + 4 and not any("smell gas" in line for line in lines)
    assert all("boiler" in line or "servic" in line for line in lines[1:])
    source_ids = [s["chunk_id"] for s in out["sources"]]
    for line in lines[1:]:
        (cited,) = CITATION.findall(line)
        assert cited[1] in source_ids and cited[0] in (
            "heating_handbook.pdf",
            "garden_and_seeds.pdf",
            "solar_and_battery.pdf",
        )
    cited_ids = [c["chunk_id"] for c in out["citations"]]
    assert source_ids[: len(cited_ids)] == cited_ids and all(
        s["cited"] for s in out["sources"][: len(cited_ids)]
    )
    assert not any(s["cited"] for s in out["sources"][len(cited_ids) :])
    top = out["sources"][0]
    assert top["title"] == "Heating and Hot Water Handbook" and top["file"] == "heating_handbook.pdf"
    assert top["page"] == 1 and top["corpus"] == "house"
    assert top["doc_cid"].startswith("blake3:") and top["node"] == n.bus.node_id and top["score"] > 0.2
    # frames: retrieval progress, then the answer's lines as deltas
    assert asked.frames[0] == {"stage": "retrieve", "corpora": {"house": "pending", "personal": "pending"}}
    assert asked.frames[2]["corpora"] == {"house": "ok", "personal": "ok"}
    assert asked.streamed == out["answer"]
    meta = out["meta"]
    assert meta["rag"] == "used" and meta["merge"] == "score" and meta["cache"] == "miss"
    assert meta["citations_removed"] == 0 and meta["model"] is None
    debug = meta["debug"]
    assert [c["chunk_id"] for c in debug["chunks"]] == source_ids
    assert all(c["similarity"] >= 0.2 for c in debug["chunks"])  # the threshold is on the cosine
    assert debug["tokens"]["context"] <= debug["tokens"]["context_room"] == 50_000
    assert debug["retrieve_ms"] > 0 and debug["total_ms"] >= debug["retrieve_ms"]


@pytest.mark.anyio
async def test_an_extractive_answer_quotes_only_sentences_close_to_the_best_one(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """The demo's questions: the inverter's error 31 is answered by one sentence (no unrelated gas
    emergency after it); a two-part question keeps the sentence of each part."""

    def quoted(out: dict[str, Any]) -> list[str]:
        return [line.split('"')[1] for line in out["answer"].split("\n")[1:]]

    async with answer_node(tmp_path, minilm=minilm) as n:
        for pdf in ("heating_handbook.pdf", "garden_and_seeds.pdf", "solar_and_battery.pdf"):
            await n.ingest("house", pdf)
        inverter = (await n.ask("What should I do if the inverter shows error 31?")).output
        boiler = (await n.ask("When is the boiler serviced, and where is its service record kept?")).output
        sown = (await n.ask("When should tomatoes be planted out?")).output
    assert quoted(inverter) == [
        "If the inverter display shows error 31, switch it off for one minute and on again."
    ]
    assert inverter["meta"]["extractive_ranking"] == "embedding"
    assert [c["file"] for c in inverter["citations"]] == ["solar_and_battery.pdf"]
    assert quoted(boiler) == [
        "The service record is kept in the blue folder on the shelf above the boiler.",
        "It is serviced every year in early October by a registered engineer, before the cold season.",
    ]
    (tomatoes,) = quoted(sown)
    assert tomatoes.startswith("Tomatoes are sown indoors in the middle of March")


def test_sentences_are_kept_within_the_margin_and_above_the_floor_and_always_one() -> None:
    from hearthnet.answer.extractive import Sentence, close_to_the_best
    from hearthnet.answer.hits import Hit

    hit = Hit(chunk_id="c" * 32, text="", score=0.5, corpus="house", node="n", embedding_model=MINILM, rank=1)

    def ranked(*scores: float) -> list[tuple[Sentence, float]]:
        return [(Sentence(f"s{i}", hit, i), s) for i, s in enumerate(scores)]

    def kept(*scores: float, floor: float = 0.3) -> list[float]:
        return [s for _, s in close_to_the_best(ranked(*scores), sentences=4, margin=0.3, floor=floor)]

    assert kept(0.886, 0.264, 0.162) == [0.886]
    assert kept(0.589, 0.540, 0.483, 0.343) == [0.589, 0.540, 0.483]  # within 30 % of the best
    assert kept(0.9, 0.89, 0.88, 0.87, 0.86) == [0.9, 0.89, 0.88, 0.87]  # at most `sentences`
    assert kept(0.35, 0.29, 0.28) == [0.35]  # the floor
    assert kept(0.1, 0.09) == [0.1]  # all weak: still the best one
    assert kept() == []
    assert kept(2.0, 1.5, 0.0, floor=0.0) == [2.0, 1.5]  # lexical scores: the margin alone


@pytest.mark.anyio
async def test_an_answer_with_nothing_to_quote_says_why_and_announces_its_kind(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """Nothing searched (no_rag), nothing searchable (an unknown corpus), nothing matching (a
    short question): each says so, and never that a passage did not match when none was read."""
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        no_rag = await n.ask(BOILER, no_rag=True)
        unknown = await n.ask("boiler", corpora=["no-such"])  # short: skipped only if searched
        short = await n.ask("hello", corpora=["house"])
    header = AnswerConfig().extractive_header
    assert no_rag.output["answer"] == header + "\n" + NOT_SEARCHED
    assert no_rag.output["meta"]["skipped"] == "no_rag"
    assert unknown.output["answer"] == header + "\n" + NO_SEARCH
    assert unknown.output["meta"]["rag"] == "unavailable" and "skipped" not in unknown.output["meta"]
    assert unknown.output["meta"]["corpora"]["no-such"]["code"] == "not_found"
    assert short.output["meta"]["skipped"] == "short_question" and short.output["meta"]["corpora"]["house"]
    for asked in (no_rag, unknown, short):
        first = next(i for i, f in enumerate(asked.frames) if "delta" in f)
        assert asked.frames[first - 1] == {"stage": "answer", "mode": "extractive", "context": []}
        assert [f for f in asked.frames if f.get("stage") == "answer"] == [asked.frames[first - 1]]


@pytest.mark.anyio
async def test_the_context_is_packed_in_rank_order_within_the_token_budget(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    # the demo's 7 chunks cost about 1,000 tokens as context lines
    async with answer_node(tmp_path / "a", minilm=minilm, config=AnswerConfig(similarity_threshold=0.0)) as n:
        await demo_node(n)
        everything = (await n.ask(BOILER)).output["meta"]["debug"]
    small = AnswerConfig(token_budget=400, similarity_threshold=0.0)
    async with answer_node(tmp_path / "b", minilm=minilm, config=small) as n:
        await demo_node(n)
        packed = (await n.ask(BOILER)).output["meta"]["debug"]
    assert everything["tokens"]["context"] > 400
    assert 0 < packed["tokens"]["context"] <= 400 == packed["tokens"]["context_room"]
    ranked = [c["chunk_id"] for c in everything["chunks"]]
    kept = [c["chunk_id"] for c in packed["chunks"]]
    assert 0 < len(kept) < len(ranked) and kept == ranked[: len(kept)]


@pytest.mark.anyio
async def test_the_similarity_threshold_applies_to_the_cosine_not_a_hybrid_score(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    """``rag.query`` ranks by a fused hybrid score by default; each hit's cosine (``similarity``)
    is what the threshold is about, so its meaning does not change with the query mode."""
    async with answer_node(tmp_path, minilm=minilm, config=AnswerConfig(similarity_threshold=0.45)) as n:
        await demo_node(n)
        chunks = (await n.ask(BOILER, debug=True)).output["meta"]["debug"]["chunks"]
    assert chunks and all(c["similarity"] >= 0.45 for c in chunks)
    assert any(c["score"] != c["similarity"] for c in chunks)  # ranked by the fused score


@pytest.mark.anyio
async def test_debug_meta_is_left_out_when_turned_off(tmp_path: Path, minilm: OnnxModel) -> None:
    async with answer_node(tmp_path, minilm=minilm, config=AnswerConfig(debug=False)) as n:
        await demo_node(n)
        quiet = (await n.ask(BOILER)).output["meta"]
        loud = (await n.ask(BOILER, debug=True)).output["meta"]
    assert "debug" not in quiet and quiet["rag"] == "used"
    assert loud["cache"] == "hit" and loud["debug"]["chunks"] and loud["debug"]["total_ms"] >= 0


@pytest.mark.anyio
async def test_every_reachable_corpus_is_asked_by_default_and_an_unknown_one_is_named(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await demo_node(n)
        default = (await n.ask("How much does the home battery store?")).output
        chosen = (await n.ask("How much does the home battery store?", corpora=["house", "nowhere"])).output
    assert set(default["meta"]["corpora"]) == {"house", "personal"}
    assert default["sources"][0]["corpus"] == "personal"  # the caller's own corpus is searched too
    assert chosen["meta"]["rag"] == "partial"
    assert chosen["meta"]["corpora"]["nowhere"]["status"] == "unavailable"
    assert chosen["meta"]["corpora"]["nowhere"]["code"] == "not_found"
    assert {s["corpus"] for s in chosen["sources"]} == {"house"}


def test_the_skip_rule_needs_both_a_short_question_and_no_chunk_above_the_threshold() -> None:
    assert should_skip("hi", None, threshold=0.2, short_chars=10)
    assert should_skip("thanks!", 0.2, threshold=0.2, short_chars=10)
    assert not should_skip("Garlic?", 0.35, threshold=0.2, short_chars=10)  # short, but it matches
    assert not should_skip("What is the capital of Mongolia?", 0.05, threshold=0.2, short_chars=10)
    assert not should_skip("0123456789", None, threshold=0.2, short_chars=10)


@pytest.mark.anyio
async def test_a_greeting_skips_retrieval_but_a_short_question_with_a_match_does_not(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await demo_node(n)
        hi = (await n.ask("hi")).output
        garlic = (await n.ask("Garlic?")).output
        off_topic = (await n.ask("Who won the chess world championship in 1972?")).output
        no_rag = await n.ask(BOILER, no_rag=True)
    assert hi["meta"]["rag"] == "skipped" and hi["sources"] == [] and hi["meta"]["chunks"] == 0
    assert garlic["meta"]["rag"] == "used" and "Garlic is planted in October" in garlic["answer"]
    # long, without a match: retrieval was used and found nothing worth quoting
    assert off_topic["meta"]["rag"] == "used"
    assert all(c["similarity"] >= 0.2 for c in off_topic["meta"]["debug"]["chunks"])
    assert no_rag.output["meta"]["rag"] == "skipped" and no_rag.output["meta"]["corpora"] == {}
    assert not any(f.get("stage") == "retrieve" for f in no_rag.frames)


@pytest.mark.anyio
async def test_with_the_embedder_down_the_answer_comes_without_context_flagged_never_failing(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await demo_node(n)
        n.bus.unregister("embed.text", n.bus.providers("embed.text")[0].descriptor.params)
        out = (await n.ask(BOILER)).output
    assert out["meta"]["rag"] == "unavailable"
    assert {c["status"] for c in out["meta"]["corpora"].values()} == {"unavailable"}
    assert {c["code"] for c in out["meta"]["corpora"].values()} == {"partition"}
    assert out["mode"] == "extractive" and out["sources"] == [] and out["citations"] == []


@pytest.mark.anyio
async def test_a_cached_answer_is_served_until_it_expires_or_its_corpus_changes(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    clock = Clock()
    async with answer_node(tmp_path, minilm=minilm, clock=clock) as n:
        await n.ingest("house", "heating_handbook.pdf")
        await n.ingest("personal", "solar_and_battery.pdf")
        first = (await n.ask(BOILER)).output
        again = await n.ask(" when is the gas boiler serviced,  and by whom? ")
        assert again.output["meta"]["cache"] == "hit" and again.output["answer"] == first["answer"]
        assert again.streamed == first["answer"] and again.output["sources"] == first["sources"]
        assert (await n.ask(BOILER, cache=False)).output["meta"]["cache"] == "miss"
        fresh = "Which company services the gas boiler?"  # cache: false skips the lookup, not the store
        assert (await n.ask(fresh, cache=False)).output["meta"]["cache"] == "miss"
        assert (await n.ask(fresh)).output["meta"]["cache"] == "hit"
        clock.now += 301
        assert (await n.ask(BOILER)).output["meta"]["cache"] == "miss"
        assert (await n.ask(BOILER)).output["meta"]["cache"] == "hit"
        # another document in the personal corpus: no event announces it, the RAG service says so
        await n.ingest("personal", "garden_and_seeds.pdf")
        assert (await n.ask(BOILER)).output["meta"]["cache"] == "miss"
        assert (await n.ask(BOILER, corpora=["house"])).output["meta"]["cache"] == "miss"
        await n.ingest("personal", "heating_handbook.pdf")
        assert (await n.ask(BOILER, corpora=["house"])).output["meta"]["cache"] == "hit"  # drew not on it
        health = n.answer.health()
    assert health["cache"]["hits"] == 4 and health["asks"] == 10


@pytest.mark.anyio
async def test_sessions_keep_history_for_follow_ups_and_are_listed_renamed_and_deleted(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        first = (await n.ask(BOILER, session="kitchen")).output
        follow = (await n.ask("And where is its service record kept?", session="kitchen")).output
        await n.ask("Garlic?", session="garden-plans")
        assert first["session"] == "kitchen" and first["meta"]["debug"]["tokens"]["history"] == 0
        assert follow["meta"]["debug"]["tokens"]["history"] > 0
    async with answer_node(tmp_path, minilm=minilm) as n:  # kept in the node's home
        listed = (await n.call("answer.sessions"))["sessions"]
        assert [s["id"] for s in listed] == ["garden-plans", "kitchen"]
        assert listed[1]["title"] == BOILER and listed[1]["turns"] == 2
        got = await n.call("answer.session.get", session="kitchen")
        assert [t["question"] for t in got["turns"]] == [BOILER, "And where is its service record kept?"]
        assert got["turns"][0]["answer"] == first["answer"] and got["turns"][0]["mode"] == "extractive"
        assert got["turns"][0]["cited"] == [c["chunk_id"] for c in first["citations"]]
        await n.call("answer.session.rename", session="kitchen", title="  Boiler   questions ")
        assert (await n.call("answer.sessions", limit=1))["sessions"][0]["id"] == "garden-plans"
        assert (await n.call("answer.session.get", session="kitchen"))["title"] == "Boiler questions"
        assert await n.call("answer.session.delete", session="kitchen") == {
            "session": "kitchen",
            "deleted": True,
        }
        assert [s["id"] for s in (await n.call("answer.sessions"))["sessions"]] == ["garden-plans"]
        for capability, extra in (
            ("answer.session.get", {}),
            ("answer.session.delete", {}),
            ("answer.session.rename", {"title": "x"}),
        ):
            with pytest.raises(NotFound, match="no session kitchen"):
                await n.call(capability, session="kitchen", **extra)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("input", "message"),
    [
        ({"question": ""}, "input.question must be a non-empty string"),
        ({"question": "x" * 8193}, "at most 8192"),
        ({"question": "q", "corpora": "house"}, "input.corpora must be a list"),
        ({"question": "q", "corpora": []}, "input.corpora must be a list"),
        ({"question": "q", "corpora": ["House!"]}, "is not a corpus name"),
        ({"question": "q", "corpora": [f"c{i}" for i in range(65)]}, "input.corpora must be a list"),
        ({"question": "q", "session": "../etc"}, "a session id is"),
        ({"question": "q", "max_tokens": 0}, "input.max_tokens"),
        ({"question": "q", "temperature": 3}, "input.temperature"),
        ({"question": "q", "debug": "yes"}, "input.debug must be true or false"),
        ({"question": "q", "top_k": 5}, "unknown answer.ask input field"),
    ],
)
async def test_bad_input_is_a_clear_bad_request_and_records_nothing(
    tmp_path: Path, minilm: OnnxModel, input: dict[str, Any], message: str
) -> None:
    async with answer_node(tmp_path, minilm=None) as n:
        with pytest.raises(BadRequest, match=re.escape(message)):
            await n.ask(**input)
        assert (await n.call("answer.sessions"))["sessions"] == [] and len(n.answer.cache) == 0


@pytest.mark.anyio
async def test_peers_can_neither_see_nor_call_the_composer(tmp_path: Path, minilm: OnnxModel) -> None:
    async with answer_node(tmp_path, minilm=None) as n:
        peer = new_bus()
        async with linked(n.bus, peer):
            assert peer.providers("answer.ask") == [] and peer.providers("answer.sessions") == []
            with pytest.raises(NotFound):
                await peer.call("answer.sessions", provider=n.bus.node_id, timeout=5)


@pytest.mark.anyio
async def test_a_stalled_corpus_is_left_out_at_the_retrieval_deadline_and_named(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    stall = anyio.Event()
    asked = anyio.Event()

    async def stalled_query(ctx: CallContext) -> dict[str, Any]:
        asked.set()
        await stall.wait()  # never set while the answer is composed
        return {"chunks": []}

    slow = new_bus()
    params = {"corpus": "slow", "embedding_model": MINILM, "k_max": 20}
    slow.register(
        Registration(CapabilityDescriptor("rag.query", params=params, timeout_seconds=60), stalled_query)
    )
    config = AnswerConfig(retrieval_timeout_seconds=1.0)
    async with answer_node(tmp_path, minilm=minilm, config=config) as n:
        await demo_node(n)
        async with linked(n.bus, slow):
            started = time.perf_counter()
            out = (await n.ask(BOILER)).output
            elapsed = time.perf_counter() - started
            only_slow = (await n.ask(BOILER, corpora=["slow"])).output
            unanswered = (await n.ask("What is the capital of France?")).output
            stall.set()
    assert asked.is_set()
    assert out["meta"]["rag"] == "partial"
    assert out["meta"]["corpora"]["slow"] == {
        "status": "timeout",
        "hits": 0,
        "ms": pytest.approx(1000, abs=300),
        "code": "timeout",
    }
    assert out["meta"]["corpora"]["house"]["status"] == "ok"
    assert "early October" in out["answer"] and {s["corpus"] for s in out["sources"]} <= {"house", "personal"}
    assert 1.0 <= elapsed < 3.0, "the stalled corpus held the answer beyond the retrieval deadline"
    assert only_slow["meta"]["rag"] == "timeout" and only_slow["sources"] == []
    assert only_slow["meta"]["cache"] == "miss"
    # abstaining, it does not claim the documents do not say: the stalled corpus might
    assert unanswered["mode"] == "abstained"
    assert unanswered["answer"].startswith("The documents that could be searched do not say")
    assert "(1 corpus could not be searched)" in unanswered["answer"]


@pytest.fixture
def other_server() -> Iterator[OpenAIEmbeddingServer]:
    server = OpenAIEmbeddingServer("hashed-words-64")
    try:
        yield server
    finally:
        server.close()


@pytest.mark.anyio
async def test_corpora_of_two_embedding_models_are_fused_by_rank(
    tmp_path: Path, minilm: OnnxModel, other_server: OpenAIEmbeddingServer
) -> None:
    async with (
        answer_node(tmp_path / "a", minilm=minilm) as a,
        answer_node(tmp_path / "b", minilm=None, other=other_server) as b,
    ):
        await a.ingest("house", "heating_handbook.pdf")
        await b.ingest("garden", "garden_and_seeds.pdf")
        async with linked(a.bus, b.bus):
            out = (await a.ask("When is garlic planted and when is the boiler serviced?")).output
            one_model = (await a.ask("When is the boiler serviced?", corpora=["house"])).output
    assert out["meta"]["merge"] == "rrf" and set(out["meta"]["corpora"]) == {"house", "garden"}
    assert {s["corpus"] for s in out["sources"]} == {"house", "garden"}
    assert out["meta"]["corpora"]["garden"]["node"] == b.bus.node_id
    fused = [c["fused"] for c in out["meta"]["debug"]["chunks"]]
    assert fused == sorted(fused, reverse=True) and fused[0] == pytest.approx(1 / 61, abs=1e-6)
    assert one_model["meta"]["merge"] == "score"


@pytest.mark.anyio
async def test_no_question_context_or_answer_text_appears_in_any_log_line(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    question = "Where is the radiator key kept, please?"
    with capture_logs() as logs:
        async with answer_node(tmp_path, minilm=minilm) as n:
            await demo_node(n)
            first = (await n.ask(question, session="s1")).output
            await n.ask(question, session="s1")  # from the cache
            await n.ask("hi", session="s1")
            n.bus.unregister("embed.text", n.bus.providers("embed.text")[0].descriptor.params)
            await n.ask(question)
    assert any(entry["event"] == "answer_composed" for entry in logs)
    assert "kitchen drawer" in first["answer"]
    # every line of the documents' text (so any chunk or sentence of them), the question, the answer
    secrets = [question.lower()[:30], *(line.lower()[:30] for line in first["answer"].split("\n"))]
    for pdf in ("heating_handbook.pdf", "garden_and_seeds.pdf", "solar_and_battery.pdf"):
        for page in pypdf.PdfReader(DEMO / pdf).pages:
            secrets += [line.lower()[:30] for line in page.extract_text().split("\n") if len(line) >= 20]
    assert len(secrets) > 25
    for entry in logs:
        flat = repr(entry).lower()
        for secret in secrets:
            assert secret not in flat, f"{entry['event']} logged text: {secret!r}"


@pytest.mark.anyio
async def test_a_member_advertising_many_corpora_cannot_make_one_ask_fan_out_to_all(
    tmp_path: Path, minilm: OnnxModel
) -> None:
    calls: list[str] = []

    async def empty(ctx: CallContext) -> dict[str, Any]:
        calls.append(ctx.params["corpus"])
        return {"chunks": []}

    many = new_bus()
    for i in range(70):
        params = {"corpus": f"c{i:02d}", "embedding_model": MINILM, "k_max": 20}
        many.register(Registration(CapabilityDescriptor("rag.query", params=params), empty))
    async with answer_node(tmp_path, minilm=minilm) as n:
        await n.ingest("house", "heating_handbook.pdf")
        async with linked(n.bus, many):
            out = (await n.ask(BOILER)).output
    assert len(out["meta"]["corpora"]) == 64 and out["meta"]["corpora_left_out"] == 7
    assert "house" in out["meta"]["corpora"] and len(calls) == 63  # this node's own corpus first
    assert "early October" in out["answer"]
    calls.clear()
    async with answer_node(tmp_path / "again", minilm=minilm) as n, linked(n.bus, many):
        meta = (await n.ask(BOILER, no_rag=True)).output["meta"]
    # no corpus was searched on purpose: none is "left out" (the CLI would say "7 more not searched")
    assert meta["corpora_left_out"] == 0 and meta["skipped"] == "no_rag" and calls == []
