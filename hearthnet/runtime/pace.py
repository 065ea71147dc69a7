"""Deadlines from the work: how long a piece of work may take, from its size and the measured pace
of whoever does it (pure bookkeeping, no I/O).

A constant timeout fails on a busy Raspberry Pi and hides a dead worker on a fast box.  A
:class:`Pace` keeps a running estimate of the seconds one unit of work (a token, a page) takes
each worker (a provider node, a model), starting from a generous guess, and gives a deadline of
``slack`` times the expected time, never below ``floor``.  A worker that overran its deadline
is at least that slow: its estimate is raised to what it showed, so the retry gets more time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["Pace"]


class Pace:
    """Seconds per unit of work, per worker, smoothed over recent calls."""

    def __init__(
        self,
        *,
        per_unit: float,
        floor: float,
        slack: float = 4.0,
        overhead: float = 0.5,
        smoothing: float = 0.3,
    ) -> None:
        if per_unit <= 0 or floor <= 0 or slack < 1 or overhead < 0 or not 0 < smoothing <= 1:
            raise ValueError("per_unit and floor must be positive, slack at least 1, smoothing in (0, 1]")
        self.initial = per_unit
        self.floor = floor
        self.slack = slack
        self.overhead = overhead
        self._smoothing = smoothing
        self._per_unit: dict[str, float] = {}

    def per_unit(self, workers: Sequence[str] = ()) -> float:
        """The slowest estimate among ``workers``; the initial guess when none has been measured."""
        known = [self._per_unit[w] for w in workers if w in self._per_unit]
        if not known and self._per_unit and not workers:
            known = list(self._per_unit.values())
        return max(known) if known else self.initial

    def expected(self, units: float, workers: Sequence[str] = ()) -> float:
        """Seconds ``units`` of work should take at the measured pace (no slack)."""
        return self.overhead + max(0.0, units) * self.per_unit(workers)

    def deadline(self, units: float, workers: Sequence[str] = ()) -> float:
        """Seconds to allow ``units`` of work: ``slack`` times the expected time, at least ``floor``."""
        return max(self.floor, self.slack * self.expected(units, workers))

    def record(self, worker: str, units: float, seconds: float) -> None:
        """``worker`` did ``units`` of work in ``seconds``."""
        if units <= 0 or seconds < 0:
            return
        took = max(0.0, seconds - self.overhead) / units
        old = self._per_unit.get(worker)
        self._per_unit[worker] = took if old is None else (1 - self._smoothing) * old + self._smoothing * took
        if old is None and took < self.initial:
            # The first measurement of a worker may be a lucky one: keep half the way to the guess.
            self._per_unit[worker] = (took + self.initial) / 2

    def overran(self, workers: Iterable[str], units: float, seconds: float) -> None:
        """``units`` of work were not done within ``seconds`` by any of ``workers``: each is at least
        twice as slow as it was thought (and at least as slow as it showed)."""
        shown = seconds / max(units, 1.0)
        for worker in workers:
            current = self._per_unit.get(worker, self.initial)
            self._per_unit[worker] = max(2 * current, shown)
