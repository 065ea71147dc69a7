"""Fair shares of a capability's ``max_concurrent`` slots among its callers (pure, no I/O).

A capability served here runs at most ``limit`` calls at once.  Without more,
one member's script with many calls in flight would hold every slot, and every
other member would get ``capacity_exceeded`` for as long as it keeps going.
:class:`Slots` therefore shares the slots among the callers that want them:

* a caller alone may use every slot (nothing is held back while nobody else
  asks);
* once a second caller has been refused, or holds a slot, each caller's share
  is ``ceil(limit / callers)``, and a caller at or over its share is refused
  until it is back under it, so the slots its calls free go to the others;
* a refused caller keeps counting as one that wants slots for a while (the
  bus says: twice the retry hint it sent, at least 2 s), long enough for its
  retry to find the slot; then, if it did not come back, the others may use
  the whole limit again.

Callers are node ids (the node's own calls count as one caller).  Times are in
the caller's clock (the bus uses the event loop's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Refusal", "Slots"]


@dataclass(frozen=True)
class Refusal:
    """Why a call was not admitted: ``held`` of the caller's ``share`` of ``limit`` slots."""

    held: int
    share: int
    limit: int
    full: bool
    """All ``limit`` slots are taken (else: the caller is at its share while others wait)."""


@dataclass
class Slots:
    """Slots of one capability held per caller, and who was refused lately."""

    total: int = 0
    held: dict[str, int] = field(default_factory=dict)
    _wanting: dict[str, float] = field(default_factory=dict)
    """Refused callers -> until when they count as wanting slots."""

    def take(self, caller: str, limit: int, now: float, *, remember: Callable[[], float]) -> Refusal | None:
        """Take a slot for ``caller`` (``None``), or say why not and remember that it asked.

        ``remember()`` (called only on a refusal) is how many seconds the
        refused caller counts as wanting slots.
        """
        mine, share = self._share(caller, limit, now)
        if self.total >= limit or mine >= share:
            self._wanting[caller] = max(self._wanting.get(caller, now), now + remember())
            return Refusal(mine, share, limit, self.total >= limit)
        self._wanting.pop(caller, None)
        self.held[caller] = mine + 1
        self.total += 1
        return None

    def would_take(self, caller: str, limit: int, now: float) -> bool:
        """Whether :meth:`take` would admit ``caller`` now."""
        mine, share = self._share(caller, limit, now)
        return self.total < limit and mine < share

    def _share(self, caller: str, limit: int, now: float) -> tuple[int, int]:
        """Slots ``caller`` holds, and its share: ``ceil(limit / callers wanting slots)``."""
        held, wanting = self.held, self._wanting
        callers = len(held) + (caller not in held)
        if wanting:
            for c, until in list(wanting.items()):
                if until <= now:
                    del wanting[c]
                elif c not in held and c != caller:
                    callers += 1
        return held.get(caller, 0), -(-limit // callers)

    def give_back(self, caller: str) -> None:
        """Release one slot that :meth:`take` gave ``caller``."""
        mine = self.held.get(caller, 0)
        if mine <= 0:
            raise ValueError(f"{caller} holds no slot")
        if mine == 1:
            del self.held[caller]
        else:
            self.held[caller] = mine - 1
        self.total -= 1
