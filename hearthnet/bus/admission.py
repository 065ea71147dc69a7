"""Fair shares of a capability's ``max_concurrent`` slots among its callers (pure, no I/O).

A capability served here runs at most ``limit`` calls at once.  Without more,
one member's script that calls again the moment a call ends would hold every
slot for as long as it kept going, and every other member would get
``capacity_exceeded``.  :class:`Slots` therefore shares the slots:

* while nobody waits, any caller may take any free slot (a caller alone may
  use all of them);
* each caller's share is ``limit // callers`` (at least 1), callers being
  those holding slots, those waiting, and the one asking;
* a caller refused while it held less than its share becomes a *waiter*; a
  waiter is *owed* a slot while it holds less than its share (shares shrink as
  callers come).  While waiters are owed slots, slots that free up are kept
  for them, first refused first served: any other caller gets a slot only
  while more are free than waiters ahead of it are owed, and a caller at its
  share is refused (without becoming a waiter) while another is owed one.  A
  free slot nobody else is owed goes to whoever asks, a waiter at its share
  included;
* a waiter stays one for ``remember`` seconds from its last refusal (the bus
  says: twice the retry hint it sent, within 0.25-30 s), long enough for a
  retry after the hint; if it does not come back, its reservation lapses.

Callers are node ids (the node's own calls count as one caller).  Times are in
one clock of the caller's choice (the bus uses the event loop's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Refusal", "Slots"]


@dataclass(frozen=True)
class Refusal:
    """Why a call was not admitted."""

    held: int
    """Slots the caller held."""
    share: int
    """The caller's share of the slots at that moment."""
    limit: int
    reason: str
    """``full`` (every slot taken), ``reserved`` (the free ones are kept for callers
    refused earlier) or ``share`` (the caller runs its share while others wait)."""


@dataclass
class Slots:
    """Slots of one capability held per caller, and the callers waiting for one."""

    total: int = 0
    held: dict[str, int] = field(default_factory=dict)
    _waiting: dict[str, float] = field(default_factory=dict)
    """Waiter -> until when it waits, in the order they were first refused (a dict keeps the
    order in which keys were first inserted, whatever is assigned to them later)."""

    def take(self, caller: str, limit: int, now: float, *, remember: Callable[[], float]) -> Refusal | None:
        """Take a slot for ``caller`` (``None``), or say why not.

        ``remember()`` (called only when ``caller`` becomes or stays a waiter)
        is how many seconds from now it stays one.
        """
        if not self._waiting and self.total < limit:  # the common case: nobody waits, a slot is free
            self.held[caller] = self.held.get(caller, 0) + 1
            self.total += 1
            return None
        mine, share, reason = self._judge(caller, limit, now)
        if reason is not None:
            if mine < share:  # owed a slot: wait for one, in order of first refusal
                until = now + remember()
                self._waiting[caller] = max(self._waiting.get(caller, until), until)
            return Refusal(mine, share, limit, reason)
        self._waiting.pop(caller, None)
        self.held[caller] = mine + 1
        self.total += 1
        return None

    def would_take(self, caller: str, limit: int, now: float) -> bool:
        """Whether :meth:`take` would admit ``caller`` now."""
        return self._judge(caller, limit, now)[2] is None

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

    def _judge(self, caller: str, limit: int, now: float) -> tuple[int, int, str | None]:
        """``(held by caller, its share, why it may not take a slot now or None)``."""
        held, waiting = self.held, self._waiting
        mine = held.get(caller, 0)
        free = limit - self.total
        if waiting:
            for c in [c for c, until in waiting.items() if until <= now]:
                del waiting[c]
        if not waiting:  # the common case: any free slot may be taken
            share = max(1, limit // (len(held) + (caller not in held)))
            return mine, share, None if free > 0 else "full"
        share = max(1, limit // len(held.keys() | waiting.keys() | {caller}))
        if free <= 0:
            return mine, share, "full"
        ahead = behind = 0  # other waiters still owed a slot, refused before / after this caller
        seen = False
        for c in waiting:
            if c == caller:
                seen = True
            elif held.get(c, 0) < share:
                if seen:
                    behind += 1
                else:
                    ahead += 1
        if mine >= share and ahead + behind:  # at its share while another is owed one
            return mine, share, "share"
        return mine, share, None if free > ahead else "reserved"
