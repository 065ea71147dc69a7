"""Provider choice: by the capability's preference, then local first unless saturated, then score.

Pure bookkeeping: the bus reports outcomes (``record_success`` /
``record_failure`` / ``quarantine``) and asks for an ordered candidate list.  A
provider that fails ``quarantine_after`` times in a row, or that let a call go
unanswered (``quarantine``), is skipped for ``quarantine_seconds`` (unless
nothing else is left).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.api import ProviderInfo

Preference = Callable[[Mapping[str, Any]], int]
"""``preference(offered_params) -> rank``: among providers that fit, a higher rank is tried first."""

QUARANTINE_AFTER = 3
QUARANTINE_SECONDS = 30.0
_EWMA_ALPHA = 0.2
_DEFAULT_LATENCY_MS = 5.0


@dataclass
class ProviderHealth:
    ewma_ms: float = _DEFAULT_LATENCY_MS
    in_flight: int = 0
    consecutive_failures: int = 0
    quarantined_until: float = 0.0
    successes: int = 0
    failures: int = 0


class Router:
    """Keeps per-(provider, capability) health and orders candidates."""

    def __init__(
        self, *, quarantine_after: int = QUARANTINE_AFTER, quarantine_seconds: float = QUARANTINE_SECONDS
    ) -> None:
        self._health: dict[tuple[str, str], ProviderHealth] = {}
        self.quarantine_after = quarantine_after
        self.quarantine_seconds = quarantine_seconds

    def health(self, node_id: str, capability: str) -> ProviderHealth:
        key = (node_id, capability)
        h = self._health.get(key)
        if h is None:
            h = self._health[key] = ProviderHealth()
        return h

    def score(self, h: ProviderHealth) -> float:
        """Lower is better: expected latency inflated by load and recent failures."""
        return h.ewma_ms * (1.0 + h.in_flight) * (1.0 + h.consecutive_failures)

    def order(
        self,
        candidates: Sequence[ProviderInfo],
        capability: str,
        *,
        now: float,
        local_saturated: bool,
        preference: Preference | None = None,
    ) -> list[ProviderInfo]:
        """Candidates in the order to try them.

        A ``preference`` ranks candidates first (a higher rank is tried before
        any lower one, local or not); within a rank, local first unless
        saturated, then remote ones by score.  Quarantined providers come last
        and only when nothing else is left.
        """
        if len(candidates) == 1:
            return [candidates[0]]  # whatever its health, it is the only one to try
        healthy: list[tuple[int, int, float, str, ProviderInfo]] = []
        quarantined: list[tuple[int, int, float, str, ProviderInfo]] = []
        for c in candidates:
            rank = 0 if preference is None else -preference(c.descriptor.params)
            if c.is_local:
                healthy.append((rank, 2 if local_saturated else 0, 0.0, c.node_id, c))
                continue
            h = self.health(c.node_id, capability)
            entry = (rank, 1, self.score(h), c.node_id, c)
            (quarantined if h.quarantined_until > now else healthy).append(entry)
        result = [e[-1] for e in sorted(healthy, key=lambda e: e[:4])]
        if not result or all(c.is_local and local_saturated for c in result):
            result += [e[-1] for e in sorted(quarantined, key=lambda e: e[:4])]
        return result

    def started(self, node_id: str, capability: str) -> None:
        self.health(node_id, capability).in_flight += 1

    def record_success(self, node_id: str, capability: str, ms: float) -> None:
        h = self.health(node_id, capability)
        h.in_flight = max(0, h.in_flight - 1)
        h.ewma_ms = (1 - _EWMA_ALPHA) * h.ewma_ms + _EWMA_ALPHA * ms
        h.consecutive_failures = 0
        h.successes += 1

    def record_failure(self, node_id: str, capability: str, *, now: float, counts: bool) -> None:
        """``counts`` is False for failures that say nothing of the provider's health."""
        h = self.health(node_id, capability)
        h.in_flight = max(0, h.in_flight - 1)
        if not counts:
            return
        h.failures += 1
        h.consecutive_failures += 1
        if h.consecutive_failures >= self.quarantine_after:
            h.quarantined_until = now + self.quarantine_seconds

    def quarantine(self, node_id: str, capability: str, *, now: float) -> None:
        """Skip ``node_id`` for ``capability`` from now on for ``quarantine_seconds``, at once: it
        let a call go unanswered (frozen, or overtaken by another provider), and the next call
        must not wait on it again."""
        h = self.health(node_id, capability)
        h.failures += 1
        h.consecutive_failures += 1
        h.quarantined_until = now + self.quarantine_seconds

    def forget(self, node_id: str) -> None:
        for key in [k for k in self._health if k[0] == node_id]:
            del self._health[key]

    def is_quarantined(self, node_id: str, capability: str, now: float) -> bool:
        return self.health(node_id, capability).quarantined_until > now
