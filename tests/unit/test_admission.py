"""Fair shares of ``max_concurrent``: a lone caller may use every slot; contending callers share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.bus.admission import Slots


def _two_seconds() -> float:
    return 2.0


def test_a_lone_caller_may_use_every_slot_and_no_more() -> None:
    s = Slots()
    assert all(s.take("a", 4, 0.0, remember=_two_seconds) is None for _ in range(4))
    refusal = s.take("a", 4, 0.0, remember=_two_seconds)
    assert refusal is not None and refusal.full and refusal.held == 4
    assert s.total == 4 and s.held == {"a": 4}


def test_once_another_caller_is_refused_the_holder_is_held_to_its_share() -> None:
    s = Slots()
    for _ in range(4):
        assert s.take("a", 4, 0.0, remember=_two_seconds) is None
    assert s.take("b", 4, 0.0, remember=_two_seconds) is not None  # full: b now waits
    s.give_back("a")
    refusal = s.take("a", 4, 0.1, remember=_two_seconds)  # the freed slot is b's
    assert refusal is not None and not refusal.full and (refusal.held, refusal.share) == (3, 2)
    assert s.take("b", 4, 0.2, remember=_two_seconds) is None
    s.give_back("a")
    s.give_back("a")
    assert s.take("b", 4, 0.3, remember=_two_seconds) is None  # b is under its share of 2
    assert s.take("b", 4, 0.3, remember=_two_seconds) is not None  # b at 2 of 2
    assert s.held == {"a": 1, "b": 2}
    assert s.take("a", 4, 0.4, remember=_two_seconds) is None  # a under its share again


def test_a_refused_caller_that_does_not_come_back_is_forgotten() -> None:
    s = Slots()
    for _ in range(3):
        assert s.take("a", 3, 0.0, remember=_two_seconds) is None
    assert s.take("b", 3, 1.0, remember=_two_seconds) is not None  # wants slots until 3.0
    s.give_back("a")
    assert s.take("a", 3, 2.9, remember=_two_seconds) is not None
    assert not s.would_take("a", 3, 2.9)
    assert s.would_take("a", 3, 3.0)
    assert s.take("a", 3, 3.0, remember=_two_seconds) is None


def test_a_waiter_that_got_its_slot_and_left_no_longer_shrinks_the_others_share() -> None:
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
def test_never_over_the_limit_or_a_share_and_no_slot_idles_for_a_lone_caller(
    limit: int, ops: list[tuple[str, str, float]]
) -> None:
    s = Slots()
    now = 0.0
    last_refused: dict[str, float] = {}
    for op, caller, step in ops:
        now += step
        if op == "give":
            if s.held.get(caller):
                s.give_back(caller)
            continue
        before, total_before = s.held.get(caller, 0), s.total
        holders = {c for c in s.held if c != caller}
        waiters = {c for c, t in last_refused.items() if c != caller and now - t < 2.0}
        refusal = s.take(caller, limit, now, remember=_two_seconds)
        assert s.total == sum(s.held.values()) <= limit
        if refusal is None:
            assert s.held[caller] == before + 1
            assert s.held[caller] <= -(-limit // (len(holders | waiters) + 1))
            last_refused.pop(caller, None)
        else:
            last_refused[caller] = now
            assert s.held.get(caller, 0) == before and s.total == total_before
            assert refusal.full == (total_before >= limit)
            if not refusal.full:
                assert before >= refusal.share
        if not holders and not waiters and total_before < limit:
            assert refusal is None  # alone, it gets every free slot
