"""Exact terms through ``rag.query`` from another node: clause numbers, part and figure numbers and
feature names from three shared PDFs, which dense search (MiniLM) blurs and hybrid search finds.

One corpus for the module: the PDFs ingested on A (embedder + RAG); every question is asked from
C (no RAG, no embedder) over the bus in each mode.  A question is found when one of the first 5
chunks contains its exact term.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from hearthnet.client import AsyncClient
from hearthnet.errors import BadRequest
from hearthnet.services.rag.low_text import LOW_TEXT_WEIGHT
from hearthnet.testing import LocalMesh, wait_for
from tests.shared_data import PDF_DIR

PDFS = ("en_federal_register_3col.pdf", "en_geobase_nhn_data_model.pdf", "en_paper_naacl06_shinyama_2col.pdf")
K = 5

# (exact term, question): each term occurs in one or two chunks of the corpus.
EXACT = (
    ("AA64", "Which rule concerns docket AA64?"),
    ("25.1581", "What does § 25.1581 require?"),
    ("25.1301", "What does section 25.1301 say?"),
    ("25.1707", "What is in § 25.1707?"),
    ("21.199", "What does 14 CFR 21.199 cover?"),
    ("21.197", "When does 21.197 apply?"),
    ("39.19", "Who can approve under section 39.19?"),
    ("11.43", "What is required by 11.43?"),
    ("11.45", "Where do I find 11.45?"),
    ("13132", "What does Executive Order 13132 require?"),
    ("12866", "Is this a significant action under Executive Order 12866?"),
    ("40113", "What authority does 49 U.S.C. 40113 give?"),
    ("P12.1.2", "What does requirement P12.1.2 state?"),
    ("EP06AU20.010", "Show figure EP06AU20.010"),
    ("FSIMS", "What is FSIMS?"),
    ("ANAC", "What is the role of ANAC?"),
    ("3.1.6.2", "What is in section 3.1.6.2?"),
    ("HydroJunction", "What is a HydroJunction?"),
    ("WaterbodyNID", "What is the WaterbodyNID attribute?"),
    ("ManMadeHydrographicLineEntity", "Describe ManMadeHydrographicLineEntity"),
    ("NavProvTer", "What does NavProvTer mean?"),
    ("LevelPriority", "What is LevelPriority used for?"),
    ("AccuracyInterval", "What is AccuracyInterval?"),
    ("CreationMetadata", "What does CreationMetadata hold?"),
    ("UnderseaFeature", "What is an UnderseaFeature?"),
    ("EDBT", "Which paper appeared at EDBT?"),
    ("2005-10-04", "What happened on 2005-10-04?"),
)
DENSE_MISSES_AT_LEAST = 15
"""Dense search missed 17 of the 27 when the set was made (MiniLM int8, k = 5); a little slack for
the embedder's batch padding."""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("hybrid"))
    try:
        a = m.add("a")
        c = m.add("c", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        m.found(a)
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=90)
        out = a.cli_json("ingest", *(str(PDF_DIR / p) for p in PDFS), "--corpus", "terms", timeout=600)
        assert all(r["ok"] for r in out["results"]), out
        wait_for(
            lambda: any(
                x["capability"].startswith("rag.query@") and x["params"].get("corpus") == "terms"
                for x in c.status()["capabilities"]
            ),
            timeout=60,
            what="C to see the corpus",
        )
        yield m
    finally:
        m.close()


def ask_all(mesh: LocalMesh, mode: str, **extra: Any) -> list[dict[str, Any]]:
    """Every question of :data:`EXACT` asked from C in ``mode``: the answers (output and meta)."""
    c = mesh.nodes["c"]

    async def go() -> list[dict[str, Any]]:
        client = AsyncClient(c.home)
        out = []
        for _, question in EXACT:
            res = await client.call(
                "rag.query",
                params={"corpus": "terms"},
                input={"query": question, "k": K, "mode": mode, **extra},
                timeout=30,
            )
            assert res.provider == mesh.nodes["a"].node_id
            out.append({"chunks": res.output["chunks"], "meta": res.meta})
        return out

    return anyio.run(go)


def found(term: str, chunks: list[dict[str, Any]]) -> bool:
    return any(term.lower() in c["text"].lower() for c in chunks)


def test_hybrid_finds_every_exact_term_and_dense_misses_many(mesh: LocalMesh) -> None:
    hybrid = ask_all(mesh, "hybrid")
    dense = ask_all(mesh, "dense")
    assert all(a["meta"]["mode"] == "hybrid" for a in hybrid)
    missed_by_hybrid = [t for (t, _), a in zip(EXACT, hybrid, strict=True) if not found(t, a["chunks"])]
    assert missed_by_hybrid == []
    missed_by_dense = [t for (t, _), a in zip(EXACT, dense, strict=True) if not found(t, a["chunks"])]
    assert len(missed_by_dense) >= DENSE_MISSES_AT_LEAST, missed_by_dense
    # every hit keeps its cosine beside the fused score; dense hits' score is that cosine
    for a in hybrid:
        for ch in a["chunks"]:
            assert -1.0 <= ch["similarity"] <= 1.0 and -0.75 <= ch["score"] <= 1.0
    for a in dense:  # a page with almost no text (low_text) ranks at half its cosine
        for ch in a["chunks"]:
            weight = LOW_TEXT_WEIGHT if ch["metadata"].get("low_text") else 1.0
            assert ch["score"] == pytest.approx(ch["similarity"] * weight, abs=1e-5)  # both rounded


def test_keyword_mode_ranks_by_bm25_and_the_default_is_hybrid(mesh: LocalMesh) -> None:
    keyword = ask_all(mesh, "keyword")
    assert all(found(t, a["chunks"]) for (t, _), a in zip(EXACT, keyword, strict=True))
    for a in keyword:
        scores = [ch["score"] for ch in a["chunks"]]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    c = mesh.nodes["c"]
    default = c.cli_json("query", "What is a HydroJunction?", "--corpus", "terms")
    assert default["meta"]["mode"] == "hybrid"


def test_a_filter_applies_to_both_legs(mesh: LocalMesh) -> None:
    only = {"doc_filename": "en_geobase_nhn_data_model.pdf"}
    answers = ask_all(mesh, "hybrid", filter=only)
    for (term, _), a in zip(EXACT, answers, strict=True):
        assert all(ch["metadata"]["doc_filename"] == only["doc_filename"] for ch in a["chunks"]), term
    # terms of that document are still found under the filter
    assert found("HydroJunction", answers[[t for t, _ in EXACT].index("HydroJunction")]["chunks"])


def test_a_bad_mode_is_bad_request(mesh: LocalMesh) -> None:
    c = mesh.nodes["c"]

    async def go() -> None:
        client = AsyncClient(c.home)
        for bad in ("sparse", "", 3, ["hybrid"]):
            with pytest.raises(BadRequest, match="mode"):
                await client.call(
                    "rag.query", params={"corpus": "terms"}, input={"query": "x", "mode": bad}, timeout=30
                )

    anyio.run(go)
