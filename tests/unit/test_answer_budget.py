"""Token estimates (``contracts.llm``, one module for ``llm.chat``'s window check and the composer) and
packing: the packed context never exceeds its budget and keeps rank order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hearthnet.answer.budget import context_room, pack
from hearthnet.contracts.llm import (
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    ROLES,
    estimate_prompt_tokens,
    estimate_tokens,
)

texts = st.text(max_size=300)


edgy = st.text(
    alphabet=st.sampled_from(list(" \t\n\r\u00a05aZ\u00e9\u00c9\u03b1\u1680\U0001f600.,-")), max_size=40
)


@given(st.one_of(texts, edgy), st.one_of(texts, edgy))
def test_a_newline_ends_every_run_so_joined_texts_cost_exactly_their_sum(a: str, b: str) -> None:
    # the composer sums the prompt's estimate from its parts (head, context lines, history,
    # question) instead of counting the whole prompt again: that is exact only because of this
    assert estimate_tokens(a + "\n" + b) == estimate_tokens(a) + 1 + estimate_tokens(b)


@given(texts)
def test_no_character_costs_more_than_two_tokens_and_text_costs_something(text: str) -> None:
    n = estimate_tokens(text)
    assert n <= 2 * len(text)
    if any(not c.isspace() for c in text):
        assert n > 0


def test_the_estimate_errs_high_for_english_and_counts_digits_one_by_one() -> None:
    # current tokenizers take ~1.3 tokens a word of English prose
    english = "The heat pump needs a yearly check of its refrigerant pressure before winter."
    assert estimate_tokens(english) >= 1.3 * len(english.split())
    assert estimate_tokens("2024-11-25") == 10  # Llama, Gemma, Mistral and Qwen split numbers into digits


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


def test_a_prompt_costs_its_messages_and_the_templates_markers() -> None:
    assert estimate_prompt_tokens([]) == REPLY_OVERHEAD
    assert estimate_prompt_tokens([("user", "Hello")]) == REPLY_OVERHEAD + MESSAGE_OVERHEAD + 2  # Hel|lo
    assert estimate_prompt_tokens([("system", "Be brief."), ("user", "Why?")]) == 4 + 2 * 6 + (3 + 1) + (
        1 + 1
    )


messages = st.lists(st.tuples(st.sampled_from(ROLES), st.one_of(texts, edgy)), max_size=6)


@given(messages, messages)
def test_a_prompts_estimate_is_the_sum_of_its_parts(
    head: list[tuple[str, str]], tail: list[tuple[str, str]]
) -> None:
    # the composer costs the system message, the history and the question apart and adds them up:
    # what llm.chat's window check counts for the whole prompt must be that sum
    whole = estimate_prompt_tokens(head + tail)
    assert whole == estimate_prompt_tokens(head) + estimate_prompt_tokens(tail) - REPLY_OVERHEAD
