"""LogSummary: the first records of a key are written, the rest counted into one summary record."""

from __future__ import annotations

from typing import Any

from hearthnet.runtime.log_summary import LogSummary


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _summary(
    first: int = 3, window: float = 10.0, max_keys: int = 1024
) -> tuple[LogSummary, list[tuple[str, dict[str, Any]]], _Clock]:
    written: list[tuple[str, dict[str, Any]]] = []
    clock = _Clock()
    s = LogSummary(
        lambda e, **f: written.append((e, f)),
        "refused",
        first=first,
        window=window,
        max_keys=max_keys,
        clock=clock,
    )
    return s, written, clock


def test_a_flood_from_one_key_writes_the_first_records_then_one_summary() -> None:
    s, written, clock = _summary()
    for i in range(10_000):
        s.log("10.0.0.9", path="/v1/models", i=i)
    assert [f["i"] for e, f in written] == [0, 1, 2]
    clock.now = 10.0
    s.log("10.0.0.9", path="/v1/models", i=10_000)  # the window closed: its summary, a new window
    assert written[3] == (
        "refused_repeated",
        {"path": "/v1/models", "i": 9_999, "count": 9_997, "seconds": 10.0},
    )
    assert written[4] == ("refused", {"path": "/v1/models", "i": 10_000})


def test_keys_are_counted_apart_and_flush_writes_what_is_left() -> None:
    s, written, _ = _summary(first=1)
    for _ in range(5):
        s.log("a", n=1)
        s.log("b", n=2)
    assert [e for e, _ in written] == ["refused", "refused"]
    s.flush("a")
    assert written[-1][0] == "refused_repeated" and written[-1][1]["count"] == 4 and written[-1][1]["n"] == 1
    s.flush()
    assert written[-1][1]["count"] == 4 and written[-1][1]["n"] == 2
    s.flush()
    assert len(written) == 4  # nothing left to summarise


def test_keys_remembered_are_bounded_the_oldest_summarised_first() -> None:
    s, written, _ = _summary(first=1, max_keys=2)
    for key in ("a", "a", "b", "c"):
        s.log(key)
    assert ("refused_repeated", {"count": 1, "seconds": 0.0}) in written
    assert sum(1 for e, _ in written if e == "refused") == 3
