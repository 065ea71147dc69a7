"""The hybrid fusion (:func:`fuse`), property-tested: every candidate once, scores bounded and
sorted, the weights' limits give each leg's own order, more BM25 never lowers a chunk, and a
chunk's score does not depend on the other candidates' cosines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.services.rag.search.fusion import fuse

ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
cosines = st.dictionaries(ids, st.floats(-1.0, 1.0, allow_nan=False), min_size=1, max_size=30)
weights = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def legs(draw: st.DrawFn) -> tuple[dict[str, float], dict[str, float]]:
    cosine = draw(cosines)
    chosen = draw(st.lists(st.sampled_from(sorted(cosine)), unique=True))
    # BM25 of a match is positive (FTS5 gives no denormals): 0 or at least 1e-3
    bm25 = {i: draw(st.one_of(st.just(0.0), st.floats(1e-3, 50.0))) for i in chosen}
    bm25.update(draw(st.dictionaries(st.text(alphabet="xyz", min_size=1), st.floats(0.0, 50.0), max_size=3)))
    return cosine, bm25


@settings(max_examples=400, deadline=None)
@given(legs(), weights)
def test_every_candidate_once_scores_bounded_and_sorted(
    both: tuple[dict[str, float], dict[str, float]], w: float
) -> None:
    cosine, bm25 = both
    fused = fuse(cosine, bm25, dense_weight=w)
    assert sorted(i for i, _ in fused) == sorted(cosine)  # keyword ids without a vector are not hits
    scores = [s for _, s in fused]
    assert all(-w - 1e-9 <= s <= 1.0 + 1e-9 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert fuse(cosine, bm25, dense_weight=w) == fused  # deterministic


@settings(max_examples=300, deadline=None)
@given(legs())
def test_weight_one_is_the_dense_order_and_zero_the_keyword_order(
    both: tuple[dict[str, float], dict[str, float]],
) -> None:
    cosine, bm25 = both
    dense = [i for i, _ in fuse(cosine, bm25, dense_weight=1.0)]
    assert dense == sorted(cosine, key=lambda i: (-cosine[i], i))
    keyword = [i for i, _ in fuse(cosine, bm25, dense_weight=0.0)]
    found = [i for i in keyword if bm25.get(i, 0.0) > 0]
    assert keyword[: len(found)] == found  # what the keyword leg found comes first ...
    ranked = [bm25[i] for i in found]
    assert ranked == sorted(ranked, reverse=True)  # ... by its BM25


@settings(max_examples=300, deadline=None)
@given(legs(), weights, st.floats(0.0, 20.0, allow_nan=False), st.data())
def test_more_bm25_never_lowers_a_chunk(
    both: tuple[dict[str, float], dict[str, float]], w: float, more: float, data: st.DataObject
) -> None:
    cosine, bm25 = both
    target = data.draw(st.sampled_from(sorted(cosine)))
    before = dict(fuse(cosine, bm25, dense_weight=w))[target]
    raised = {**bm25, target: bm25.get(target, 0.0) + more}
    after = dict(fuse(cosine, raised, dense_weight=w))[target]
    assert after >= before - 1e-9


@settings(max_examples=300, deadline=None)
@given(legs(), weights, st.floats(-1.0, 1.0, allow_nan=False))
def test_a_score_is_comparable_across_corpora(
    both: tuple[dict[str, float], dict[str, float]], w: float, other: float
) -> None:
    """The cosine is not rescaled per query: adding a candidate that the keyword leg did not find
    leaves every other score as it was (so a one-chunk corpus's weak chunk stays weak)."""
    cosine, bm25 = both
    before = dict(fuse(cosine, bm25, dense_weight=w))
    after = dict(fuse({**cosine, "new-one": other}, bm25, dense_weight=w))
    assert all(after[i] == pytest.approx(before[i]) for i in before)


def test_the_documented_formula() -> None:
    fused = dict(fuse({"a": 0.9, "b": 0.5, "c": 0.1}, {"a": 7.0, "c": 3.5}))
    assert fused["a"] == pytest.approx(0.75 * 0.9 + 0.25)
    assert fused["b"] == pytest.approx(0.75 * 0.5)
    assert fused["c"] == pytest.approx(0.75 * 0.1 + 0.25 * 0.5)


def test_a_bad_weight_is_refused() -> None:
    with pytest.raises(ValueError, match="dense_weight"):
        fuse({"a": 1.0}, {}, dense_weight=1.5)
    assert fuse({}, {"a": 1.0}) == []
