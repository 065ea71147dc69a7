"""Packing the composer's context: it never exceeds its budget and keeps rank order, and the room
for it respects both the budget and the model's window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hearthnet.answer.budget import context_room, pack

costs = st.lists(st.integers(min_value=0, max_value=500), max_size=60)


@given(costs, st.integers(min_value=0, max_value=5000), st.integers(min_value=0, max_value=80))
def test_packing_never_exceeds_the_budget_and_keeps_a_prefix_in_rank_order(
    items: list[int], budget: int, max_items: int
) -> None:
    ranked = list(enumerate(items))  # (rank, cost)
    kept, used = pack(ranked, budget=budget, max_items=max_items, cost=lambda item: item[1])
    assert used == sum(c for _, c in kept) <= budget
    assert len(kept) <= max_items
    assert kept == ranked[: len(kept)], "a lower-ranked chunk displaced a higher-ranked one"
    if len(kept) < min(len(ranked), max_items):  # it stopped early: the next one did not fit
        assert used + ranked[len(kept)][1] > budget


@given(
    st.integers(min_value=1, max_value=200_000),
    st.one_of(st.none(), st.integers(min_value=0, max_value=200_000)),
    st.integers(min_value=0, max_value=100_000),
    st.integers(min_value=1, max_value=50_000),
)
def test_the_room_for_context_respects_both_the_budget_and_the_model_window(
    budget: int, window: int | None, fixed: int, max_tokens: int
) -> None:
    room = context_room(token_budget=budget, context_tokens=window, fixed_tokens=fixed, max_tokens=max_tokens)
    assert 0 <= room <= budget
    if window is not None:
        assert room == 0 or room + fixed + max_tokens <= window


def test_the_seed_budget_applies_under_a_large_window_and_the_window_under_a_small_one() -> None:
    assert (
        context_room(token_budget=50_000, context_tokens=128_000, fixed_tokens=900, max_tokens=1024) == 50_000
    )
    assert context_room(token_budget=50_000, context_tokens=8192, fixed_tokens=900, max_tokens=1024) == 6268
    assert context_room(token_budget=50_000, context_tokens=None, fixed_tokens=900, max_tokens=1024) == 50_000
