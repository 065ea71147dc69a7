"""Shared benchmark plumbing: result rows, medians with min-max, machine facts."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hearthnet.runtime.observability import configure_logging

# The benchmark process's own buses and clients log warnings only, to stderr:
# stdout carries the JSON result.
configure_logging("warning")

SHARED_DATA = Path(
    os.environ.get("HEARTHNET_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data")
)
"""The shared third-party data (PDFs, SciFact) beside the repository."""


@dataclass(frozen=True)
class Metric:
    """One measured figure beside its floor, both from the same run."""

    issue: str
    name: str
    unit: str
    ours: float
    floor: float | None
    ratio: float | None
    target: str
    passed: bool | None
    ours_min: float | None = None
    ours_max: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PeerMetric:
    """One figure of ours beside what a user would otherwise run (the peer), both from the same run.

    ``ours = None`` means not measured (``note`` says why); ``peer = None`` means the target is
    absolute and there is no peer.  ``ratio`` is ours / peer.
    """

    issue: str
    name: str
    unit: str
    ours: float | None
    peer: float | None
    peer_name: str
    target: str
    passed: bool | None
    ours_min: float | None = None
    ours_max: float | None = None
    peer_min: float | None = None
    peer_max: float | None = None
    note: str = ""
    ratio: float | None = field(init=False)
    kind: str = field(init=False, default="peer")

    def __post_init__(self) -> None:
        ratio = None
        if self.ours is not None and self.peer:
            ratio = round(self.ours / self.peer, 3)
        object.__setattr__(self, "ratio", ratio)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def helper_servers() -> Iterator[Callable[..., int]]:
    """``start(source, *args)`` runs ``python -c source *args`` and returns the port it prints.

    Every process started is killed and reaped on leaving, however the benchmark ends
    (a helper left serving would keep a piped ``make bench`` from ever finishing).
    """
    procs: list[subprocess.Popen[bytes]] = []

    def start(source: str, *args: str) -> int:
        proc = subprocess.Popen([sys.executable, "-c", source, *args], stdout=subprocess.PIPE)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip():
            raise RuntimeError("a helper server exited before printing its port")
        return int(line)

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def node_like_process() -> None:
    """Tune this process's allocator as ``hearthnet node run`` does (floors and nodes alike)."""
    from hearthnet.runtime.process_settings import tune_malloc

    tune_malloc()


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; an empty sample has none (a figure of nothing must not pass)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sample")
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


def cpu_ticks() -> tuple[int, int]:
    """(total, steal) CPU ticks since boot from /proc/stat; (0, 0) where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields), (fields[7] if len(fields) > 7 else 0)


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of CPU time the hypervisor gave to other guests between two :func:`cpu_ticks`."""
    total = after[0] - before[0]
    return round(100.0 * (after[1] - before[1]) / total, 1) if total > 0 else 0.0


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cores": os.cpu_count(),
        "load_avg_1m": round(load[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
