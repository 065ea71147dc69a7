"""Archives, pure parts: metadata mapping, the layer filter with the caller's, scores, merging."""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.services.rag.archives.archive import archive_clause, map_metadata, score_of
from hearthnet.services.rag.archives.merge import RRF_K, ArchiveHit, merge_hits
from hearthnet.services.rag.results import Hit
from hearthnet.services.rag.search.filters import build_where, chroma_where, where_matches

SEED_METADATA = {
    "document_id": "9b0c7d5e-0000-4000-8000-000000000001",
    "repository_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    "organization_id": "0b9c1a52-6c1e-4c53-9f57-2f3f1d7d6a10",
    "layer": "chunk",
    "char_start": 1200,
    "char_end": 1900,
    "token_count": 140,
    "text_preview": "Die Heizungsanlage wurde am 15. Januar",
    "page_number": 3,
    "section_heading": "4.2 Wartung",
    "chunk_index": 7,
}


def test_seed_metadata_is_mapped_to_hearthnets_names() -> None:
    assert map_metadata(SEED_METADATA) == {
        "document_id": "9b0c7d5e-0000-4000-8000-000000000001",
        "repository_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "organization_id": "0b9c1a52-6c1e-4c53-9f57-2f3f1d7d6a10",
        "layer": "chunk",
        "char_start": 1200,
        "char_end": 1900,
        "token_count": 140,
        "page": 3,
        "section_heading": "4.2 Wartung",
        "chunk_index": 7,
    }


def test_the_preview_and_values_that_are_not_scalars_are_never_passed_on() -> None:
    mapped = map_metadata(
        {"text_preview": "secret words", "sparse": {"indices": [1]}, "ok": True, "none": None}
    )
    assert mapped == {"ok": True}


def test_the_archives_page_number_wins_over_a_field_named_page() -> None:
    assert map_metadata({"page": "iv", "page_number": 4}) == {"page": 4}
    assert map_metadata({"page": 9}) == {"page": 9}


LAYER_CHUNK = {"layer": {"$eq": "chunk"}}


def test_the_layer_filter_applies_by_default() -> None:
    assert archive_clause(None, "chunk") == LAYER_CHUNK
    assert archive_clause({}, "page") == {"layer": {"$eq": "page"}}


def test_the_callers_filter_is_combined_with_the_layer_and_speaks_hearthnets_names() -> None:
    where = build_where({"page": {"$gte": 3}, "document_id": "d1"})
    assert archive_clause(where, "chunk") == {
        "$and": [LAYER_CHUNK, {"page_number": {"$gte": 3}}, {"document_id": {"$eq": "d1"}}]
    }
    either = build_where({"$or": [{"page": 1}, {"section_heading": "Intro"}]})
    assert archive_clause(either, "chunk") == {
        "$and": [LAYER_CHUNK, {"$or": [{"page_number": {"$eq": 1}}, {"section_heading": {"$eq": "Intro"}}]}]
    }


def test_a_caller_naming_the_layer_chooses_it() -> None:
    """``filter {layer: page}`` searches pages: combined with the default it would match nothing."""
    where = build_where({"layer": {"$in": ["page", "section"]}, "page": 2})
    assert archive_clause(where, "chunk") == {
        "$and": [{"layer": {"$in": ["page", "section"]}}, {"page_number": {"$eq": 2}}]
    }


@pytest.mark.parametrize(
    ("metadata", "matches"),
    [
        (SEED_METADATA, True),
        ({**SEED_METADATA, "layer": "page"}, False),
        ({**SEED_METADATA, "page_number": 2}, False),
        ({**SEED_METADATA, "page_number": 2.5}, False),
    ],
)
def test_the_combined_clause_means_what_it_says(metadata: dict[str, Any], matches: bool) -> None:
    clause = archive_clause(build_where({"page": {"$gt": 2.5}}), "chunk")
    assert where_matches(clause, metadata) is matches
    # ChromaDB gets a widened clause (its integer comparison truncates 2.5): never narrower
    sent = chroma_where(clause)
    assert sent is not None and (where_matches(sent, metadata) or not matches)


def test_scores_are_similarities() -> None:
    assert score_of(0.25, "cosine") == pytest.approx(0.75)
    assert score_of(0.0, "ip") == pytest.approx(1.0)
    assert score_of(0.5, "l2") == pytest.approx(0.75)  # squared L2 of unit vectors: 2 - 2 cos


def ahit(
    model: str, chunk: str, score: float, *, text: str | None = None, source: int = 0, rank: int = 1
) -> ArchiveHit:
    return ArchiveHit(
        archive=f"archive-{source}",
        collection_name=f"repo_{source}",
        server="http://chromadb:8000",
        embedding_model=model,
        hit=Hit(
            chunk_id=chunk, text=text if text is not None else f"text of {chunk}", metadata={}, score=score
        ),
        rank=rank,
        source=source,
    )


def test_one_model_is_merged_by_score() -> None:
    ranked, how = merge_hits([ahit("m", "a", 0.5), ahit("m", "b", 0.9, source=1), ahit("m", "c", 0.7)])
    assert how == "score"
    assert [(r.hit.hit.chunk_id, r.fused) for r in ranked] == [("b", 0.9), ("c", 0.7), ("a", 0.5)]


def test_two_models_are_fused_by_reciprocal_rank() -> None:
    """Scores of two models are not comparable: a 0.95 of one model must not beat the other's top
    hit by its number alone; the RRF sum orders, a text both lists hold first."""
    a = [ahit("minilm", "a1", 0.95), ahit("minilm", "a2", 0.94), ahit("minilm", "both", 0.30, text="shared")]
    b = [ahit("ngram", "b1", 0.40, source=1), ahit("ngram", "b-both", 0.35, source=1, text="shared")]
    ranked, how = merge_hits([*a, *b])
    assert how == "rrf"
    fused = {r.hit.hit.text: r.fused for r in ranked}
    assert fused["shared"] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 2))
    assert fused["text of a1"] == pytest.approx(1 / (RRF_K + 1)) == pytest.approx(fused["text of b1"])
    assert [r.hit.hit.text for r in ranked] == ["shared", "text of a1", "text of b1", "text of a2"]
    assert len(ranked) == 4  # the shared text once


def test_a_segment_or_text_met_twice_is_kept_once() -> None:
    same_segment = [ahit("m", "x", 0.8), ahit("m", "x", 0.6, rank=2)]
    assert [r.fused for r in merge_hits(same_segment)[0]] == [0.8]
    same_text = [
        ahit("m", "x", 0.8, text="Gleicher  Text"),
        ahit("m", "y", 0.9, source=1, text="gleicher text"),
    ]
    ((only,),) = [merge_hits(same_text)[0]]
    assert only.hit.hit.chunk_id == "y"


def test_ties_never_depend_on_arrival() -> None:
    hits = [ahit("m", "a", 0.5, source=1), ahit("m", "b", 0.5, source=0, rank=2), ahit("m", "c", 0.5)]
    for order in (hits, hits[::-1]):
        assert [r.hit.hit.chunk_id for r in merge_hits(order)[0]] == ["c", "b", "a"]
