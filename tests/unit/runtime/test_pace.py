"""Deadlines from the work: the pace bookkeeping alone (pure, no I/O)."""

from __future__ import annotations

import pytest

from hearthnet.runtime.pace import Pace


def test_a_deadline_grows_with_the_work_and_never_falls_below_the_floor() -> None:
    pace = Pace(per_unit=0.01, floor=10.0, slack=4.0, overhead=0.5)
    assert pace.deadline(1) == 10.0  # a query: the configured timeout
    assert pace.deadline(8192) == pytest.approx(4 * (0.5 + 8192 * 0.01))  # 32 full chunks: minutes


def test_the_pace_follows_what_each_worker_showed() -> None:
    pace = Pace(per_unit=0.01, floor=1.0, overhead=0.0, smoothing=0.5)
    for _ in range(20):
        pace.record("fast", 1000, 1.0)  # 1 ms a unit
        pace.record("slow", 1000, 10.0)  # 10 ms a unit
    assert pace.per_unit(["fast"]) == pytest.approx(0.001, rel=0.01)
    assert pace.per_unit(["slow"]) == pytest.approx(0.01, rel=0.01)
    assert pace.per_unit(["fast", "slow"]) == pytest.approx(0.01, rel=0.01)  # the slowest listed
    assert pace.per_unit(["unknown"]) == 0.01  # never measured: the initial guess


def test_an_overrun_at_least_doubles_the_estimate_so_the_retry_gets_more_time() -> None:
    pace = Pace(per_unit=0.01, floor=1.0, overhead=0.0)
    pace.record("a", 100, 0.1)
    before = pace.deadline(100, ["a"])
    pace.overran(["a"], 100, before)
    assert pace.deadline(100, ["a"]) >= 2 * before
    pace.overran(["b"], 10, 50.0)  # shown 5 s a unit: at least that
    assert pace.per_unit(["b"]) >= 5.0


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Pace(per_unit=0.0, floor=1.0)
    with pytest.raises(ValueError):
        Pace(per_unit=0.01, floor=1.0, slack=0.5)
