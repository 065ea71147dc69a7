"""Waiting on a condition inside async tests: poll it under a deadline, never a fixed sleep."""

from __future__ import annotations

from collections.abc import Callable

import anyio


async def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Return once ``predicate()`` is true; ``TimeoutError`` after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.001)
