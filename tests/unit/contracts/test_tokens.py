"""The token estimate of ``contracts.llm``: the one ``llm.chat``'s window check counts with and the
composer packs its prompt with (so what the composer sends, the model's node accepts)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
