"""Merging corpora: by score within one embedding model, by reciprocal rank fusion across models."""

from __future__ import annotations

import itertools
import random

from hypothesis import given
from hypothesis import strategies as st

from hearthnet.answer.hits import Hit
from hearthnet.answer.merge import merge
from hearthnet.contracts.fusion import RRF_K


def hit(chunk_id: str, score: float, corpus: str = "garden", model: str = "minilm", text: str = "") -> Hit:
    return Hit(
        chunk_id=chunk_id,
        text=text or f"text of {chunk_id}",
        score=score,
        corpus=corpus,
        node="ed25519:n",
        embedding_model=model,
        rank=1,
        metadata={"doc_cid": "blake3:" + "0" * 64, "doc_title": "Doc", "page": 1},
    )


def test_corpora_of_one_model_are_merged_by_score() -> None:
    a = [hit("a1", 0.9, "a"), hit("a2", 0.5, "a"), hit("a3", 0.3, "a")]
    b = [hit("b1", 0.8, "b"), hit("b2", 0.7, "b")]
    ranked, how = merge(a + b)
    assert how == "score"
    assert [r.hit.chunk_id for r in ranked] == ["a1", "b1", "b2", "a2", "a3"]
    assert [r.fused for r in ranked] == [0.9, 0.8, 0.7, 0.5, 0.3]


def test_corpora_of_different_models_are_fused_by_rank_not_by_their_incomparable_scores() -> None:
    # model "wide" scores everything high; by raw score its last hit would beat "minilm"'s best
    minilm = [hit("m1", 0.45, "a", "minilm"), hit("m2", 0.40, "a", "minilm")]
    wide = [hit("w1", 0.95, "b", "wide"), hit("w2", 0.93, "b", "wide"), hit("w3", 0.92, "b", "wide")]
    ranked, how = merge(minilm + wide)
    assert how == "rrf"
    order = [r.hit.chunk_id for r in ranked]
    assert order.index("m1") < order.index("w2") and order.index("m2") < order.index("w3")
    assert ranked[0].fused == 1 / (RRF_K + 1)


def test_the_same_chunk_in_two_models_lists_is_fused_into_one_entry_that_ranks_first() -> None:
    shared = "Bleed the radiators every autumn."
    minilm = [hit("m1", 0.6, "a", "minilm", text="other"), hit("x", 0.5, "a", "minilm", text=shared)]
    wide = [hit("y", 0.9, "b", "wide", text=shared + "  "), hit("w2", 0.8, "b", "wide")]
    ranked, _ = merge(minilm + wide)
    assert ranked[0].hit.text.strip() == shared and len(ranked) == 3
    assert abs(ranked[0].fused - (1 / (RRF_K + 2) + 1 / (RRF_K + 1))) < 1e-12


def test_duplicates_by_id_or_by_text_are_kept_once_with_their_best_score() -> None:
    hits = [
        hit("c1", 0.5, "a"),
        hit("c1", 0.7, "b"),  # the same chunk through another provider
        hit("c2", 0.6, "a", text="Same words here."),
        hit("c3", 0.4, "b", text="same   words HERE."),  # the same text in another corpus
    ]
    ranked, _ = merge(hits)
    assert [(r.hit.chunk_id, r.hit.score) for r in ranked] == [("c1", 0.7), ("c2", 0.6)]


TEXTS = ["shared text", "Shared  text", "other", "shared text"]
"""The text of chunk ``c{i}`` for i < 4 (some ids share a text, as one document in two corpora does)."""


@st.composite
def hits_of(draw: st.DrawFn) -> Hit:
    i = draw(st.integers(min_value=0, max_value=11))
    return hit(
        f"c{i}",
        draw(st.floats(min_value=-1, max_value=1, allow_nan=False)),
        draw(st.sampled_from(["a", "b", "c"])),
        draw(st.sampled_from(["minilm", "wide"])),
        text=TEXTS[i] if i < len(TEXTS) else "",
    )


hit_lists = st.lists(hits_of(), max_size=30)


@given(hit_lists, st.randoms(use_true_random=False))
def test_merge_keeps_each_chunk_once_and_does_not_depend_on_arrival_order(
    hits: list[Hit], rnd: random.Random
) -> None:
    ranked, how = merge(hits)
    ids = [r.hit.chunk_id for r in ranked]
    texts = [" ".join(r.hit.text.split()).casefold() for r in ranked]
    assert len(set(ids)) == len(ids) and len(set(texts)) == len(texts)
    assert {h.chunk_id for h in hits} >= set(ids)
    assert all(a.fused >= b.fused for a, b in itertools.pairwise(ranked))
    shuffled = list(hits)
    rnd.shuffle(shuffled)
    again, how_again = merge(shuffled)
    assert how_again == how and [r.hit.chunk_id for r in again] == ids
    if how == "rrf":  # an entry found in both models' lists outranks a first place in only one
        assert all(0 < r.fused <= 2 / (RRF_K + 1) for r in ranked)
