"""Fair shares of ``max_concurrent``: free slots go to whoever asks until someone is refused;
then they are kept for the callers refused, in order, so a caller that re-calls at once cannot
starve one that retries after the hint."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hearthnet.bus.admission import Slots


def _two_seconds() -> float:
    return 2.0


def test_a_lone_caller_may_use_every_slot_and_no_more() -> None:
    s = Slots()
    assert all(s.take("a", 4, 0.0, remember=_two_seconds) is None for _ in range(4))
    refusal = s.take("a", 4, 0.0, remember=_two_seconds)
    assert refusal is not None and refusal.reason == "full" and refusal.held == 4
    assert s.total == 4 and s.held == {"a": 4}
    s.give_back("a")
    assert s.take("a", 4, 0.1, remember=_two_seconds) is None  # not a waiter: nothing is kept


def test_a_freed_slot_is_kept_for_the_caller_refused_earlier() -> None:
    s = Slots()
    for _ in range(4):
        assert s.take("a", 4, 0.0, remember=_two_seconds) is None
    b = s.take("b", 4, 0.0, remember=_two_seconds)
    assert b is not None and b.reason == "full"  # b now waits
    s.give_back("a")
    refusal = s.take("a", 4, 0.1, remember=_two_seconds)  # the freed slot is b's
    assert refusal is not None and refusal.reason == "share" and (refusal.held, refusal.share) == (3, 2)
    assert s.take("b", 4, 0.2, remember=_two_seconds) is None
    s.give_back("a")
    assert s.take("a", 4, 0.3, remember=_two_seconds) is None  # nobody waits: any free slot
    assert s.take("b", 4, 0.3, remember=_two_seconds) is not None  # full; b (1 of 2) waits again
    s.give_back("a")
    assert s.take("a", 4, 0.4, remember=_two_seconds) is not None  # kept for b
    assert s.take("b", 4, 0.4, remember=_two_seconds) is None
    assert s.held == {"a": 2, "b": 2}


def test_with_one_slot_callers_take_turns_in_the_order_they_were_refused() -> None:
    s = Slots()
    assert s.take("a", 1, 0.0, remember=_two_seconds) is None
    assert s.take("b", 1, 0.1, remember=_two_seconds) is not None
    assert s.take("c", 1, 0.2, remember=_two_seconds) is not None
    s.give_back("a")
    for early in ("a", "c"):  # a re-calls at once, c asks out of turn: the slot is b's
        refusal = s.take(early, 1, 0.3, remember=_two_seconds)
        assert refusal is not None and refusal.reason == "reserved"
    assert s.take("b", 1, 0.4, remember=_two_seconds) is None
    s.give_back("b")
    assert s.take("a", 1, 0.5, remember=_two_seconds) is not None  # behind c now
    assert s.take("c", 1, 0.6, remember=_two_seconds) is None


def test_a_waiter_that_does_not_come_back_is_forgotten() -> None:
    s = Slots()
    for _ in range(3):
        assert s.take("a", 3, 0.0, remember=_two_seconds) is None
    assert s.take("b", 3, 1.0, remember=_two_seconds) is not None  # waits until 3.0
    s.give_back("a")
    assert s.take("a", 3, 2.9, remember=_two_seconds) is not None
    assert not s.would_take("a", 3, 2.9)
    assert s.would_take("a", 3, 3.0)
    assert s.take("a", 3, 3.0, remember=_two_seconds) is None


def test_a_waiter_that_got_its_slot_and_left_no_longer_holds_the_others_back() -> None:
    s = Slots()
    assert s.take("a", 2, 0.0, remember=_two_seconds) is None
    assert s.take("a", 2, 0.0, remember=_two_seconds) is None
    assert s.take("b", 2, 0.1, remember=_two_seconds) is not None  # b waits
    s.give_back("a")
    assert s.take("b", 2, 0.2, remember=_two_seconds) is None  # b served: no longer waiting
    s.give_back("b")
    s.give_back("a")
    assert s.take("a", 2, 0.3, remember=_two_seconds) is None
    assert s.take("a", 2, 0.3, remember=_two_seconds) is None  # alone again: both slots


def test_a_waiter_at_its_share_no_longer_keeps_a_free_slot_idle() -> None:
    s = Slots()
    for _ in range(3):
        assert s.take("a", 4, 0.0, remember=_two_seconds) is None
    assert s.take("c", 4, 0.0, remember=_two_seconds) is None
    assert s.take("c", 4, 0.0, remember=_two_seconds) is not None  # full, c (1 of 2) waits
    s.give_back("a")
    s.give_back("a")
    assert s.take("b", 4, 0.1, remember=_two_seconds) is None  # 3 callers now: shares of 1
    assert s.would_take("a", 4, 0.1) and s.would_take("c", 4, 0.1)  # nobody is owed the free slot
    assert s.take("c", 4, 0.1, remember=_two_seconds) is None
    assert s.held == {"a": 1, "b": 1, "c": 2}


def test_giving_back_a_slot_not_held_is_an_error() -> None:
    s = Slots()
    with pytest.raises(ValueError):
        s.give_back("a")


_ops = st.lists(
    st.tuples(st.sampled_from(["take", "give"]), st.sampled_from("abcd"), st.floats(0, 0.5)),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 9), ops=_ops)
@example(  # c, refused while under its share, waits; b's arrival shrinks c's share to what it holds:
    # c must not be refused the free slot nobody else is owed (it was, as "share", until c lapsed)
    limit=4,
    ops=[("take", "a", 0.0)] * 3
    + [("take", "c", 0.0)] * 2
    + [("give", "a", 0.0)] * 2
    + [("take", "b", 0.0), ("take", "c", 0.0)],
)
def test_never_over_the_limit_and_no_slot_idles_while_nobody_waits(
    limit: int, ops: list[tuple[str, str, float]]
) -> None:
    s = Slots()
    now = 0.0
    waiting_until: dict[str, float] = {}  # callers refused under their share -> when that lapses
    for op, caller, step in ops:
        now += step
        if op == "give":
            if s.held.get(caller):
                s.give_back(caller)
            continue
        before, total_before = s.held.get(caller, 0), s.total
        waiters = {c for c, until in waiting_until.items() if until > now and c != caller}
        refusal = s.take(caller, limit, now, remember=_two_seconds)
        assert s.total == sum(s.held.values()) <= limit
        if refusal is None:
            assert s.held[caller] == before + 1
            waiting_until.pop(caller, None)
        else:
            assert s.held.get(caller, 0) == before and s.total == total_before
            assert (refusal.reason == "full") == (total_before >= limit)
            if refusal.reason == "share":
                assert before >= refusal.share
            if before < refusal.share:
                waiting_until[caller] = now + 2.0
        if not waiters and total_before < limit:
            assert refusal is None  # while nobody else waits, a free slot is never refused


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 6),
    hogs=st.integers(1, 3),
    durations=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=20),
    retry=st.floats(0.01, 0.5),
)
def test_callers_that_call_again_at_once_cannot_starve_one_that_retries_after_the_hint(
    limit: int, hogs: int, durations: list[float], retry: float
) -> None:
    """Hogs fill every slot and call again the moment a call ends; the waiter asks at t = 0.5
    and then every ``retry`` s (within its memory of 2 x retry).  It gets a slot once the hogs
    refused before it (when there are more hogs than slots) have had theirs."""
    s = Slots()
    remember = lambda: 2 * retry  # noqa: E731
    ends: list[tuple[float, int, str]] = []
    n = 0

    def fill(hog: str, now: float) -> None:
        nonlocal n
        while s.take(hog, limit, now, remember=remember) is None:
            heapq.heappush(ends, (now + durations[n % len(durations)], n, hog))
            n += 1

    for h in range(hogs):
        fill(f"hog{h}", 0.0)
    asked_at, next_try = 0.5, 0.5
    while True:
        if ends and ends[0][0] <= next_try:
            now, _, hog = heapq.heappop(ends)
            s.give_back(hog)
            for h in range(hogs):  # every hog asks again at once, the one that finished first
                fill(hog if h == 0 else f"hog{h}", now)
            continue
        if s.take("waiter", limit, next_try, remember=remember) is None:
            break
        next_try += retry
        # behind at most the hogs refused before it, each served once, then its own turn
        assert next_try - asked_at <= (hogs + 1) * max(durations) + 2 * retry, "the waiter starves"
