"""Per-capability call statistics for ``node.stats`` (pure, no I/O)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hearthnet.bus.admission import Slots

_WINDOW = 2048
_P50_EVERY = 32


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1))))
    return sorted_values[rank]


@dataclass
class CapabilityStats:
    """Counters and a sliding latency window for one capability served here."""

    calls: int = 0
    errors: int = 0
    last_error: str | None = None
    errors_by_code: dict[str, int] = field(default_factory=dict)
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_WINDOW))
    slots: Slots = field(default_factory=Slots)
    """Who runs how many calls now (``max_concurrent`` and its fair shares)."""

    @property
    def in_flight(self) -> int:
        return self.slots.total

    def record(self, ms: float | None, error_code: str | None) -> None:
        """Count one call; ``ms`` None for a call refused before it ran (kept out of p50/p99)."""
        self.calls += 1
        if ms is not None:
            self.latencies_ms.append(ms)
        if error_code is not None:
            self.errors += 1
            self.last_error = error_code
            self.errors_by_code[error_code] = self.errors_by_code.get(error_code, 0) + 1

    _p50: tuple[int, float] = (-_P50_EVERY, 0.0)
    """``(calls when computed, p50)``: the hint is asked for on every refusal, and sorting the
    window each time cost more than the refusal itself under load."""

    def p50_ms(self) -> float:
        """The median of the latency window, recomputed at most every ``_P50_EVERY`` calls."""
        at, value = self._p50
        if self.calls - at >= _P50_EVERY:
            value = percentile(sorted(self.latencies_ms), 0.5)
            self._p50 = (self.calls, value)
        return value

    def retry_after_ms(self) -> int:
        """The hint sent with ``capacity_exceeded``: a typical call's time, at least 10 ms."""
        return int(max(10.0, self.p50_ms()))

    def waiter_memory(self) -> float:
        """Seconds a caller refused under its share keeps its turn: twice the hint, 0.05-30 s.

        Short, because a caller with another provider goes there at once (``bus.call``) and
        never comes back: a slot kept for it stays idle that long.
        """
        return min(30.0, max(0.05, 2 * self.retry_after_ms() / 1000))

    def snapshot(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)
        return {
            "calls": self.calls,
            "errors": self.errors,
            "in_flight": self.in_flight,
            "last_error": self.last_error,
            "errors_by_code": dict(self.errors_by_code),
            "p50_ms": round(percentile(ordered, 0.5), 3),
            "p99_ms": round(percentile(ordered, 0.99), 3),
        }


class StatsBook:
    """All capability stats of one node, keyed by ``name@X.Y``."""

    def __init__(self) -> None:
        self._by_ref: dict[str, CapabilityStats] = {}

    def get(self, ref: str) -> CapabilityStats:
        stats = self._by_ref.get(ref)
        if stats is None:
            stats = self._by_ref[ref] = CapabilityStats()
        return stats

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {ref: s.snapshot() for ref, s in sorted(self._by_ref.items())}
