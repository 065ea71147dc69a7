"""A busy, small machine for tests and benchmarks: a process's CPU capped with a cgroup, and other
processes keeping every core busy.

:func:`cpu_capped` puts a running process (its threads, and the children it starts later) in a
new cgroup whose CPU quota is ``cores`` (cgroup v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``),
named with this process's pid so that tests running at the same time never share one; on
leaving, whatever is still in it goes back to the parent cgroup and the cgroup is removed, also
when the body failed.  :class:`CpuCapUnavailable` says why a cap cannot be made here (not root,
no cpu controller): callers skip with that reason.  :func:`busy_cores` runs bounded busy loops
(each ends by itself after ``seconds``) and kills them on leaving.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CpuCapUnavailable", "busy_cores", "cpu_capped"]

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
_names = itertools.count()


class CpuCapUnavailable(RuntimeError):
    """No CPU cap can be made on this machine; the message says why."""


def _parent() -> tuple[Path, str]:
    """Where to make the cgroup and which interface it speaks ("v2" or "v1")."""
    if os.geteuid() != 0:
        raise CpuCapUnavailable("capping a process's CPU needs root (a cgroup is made for it)")
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        if "cpu" not in (ROOT / "cgroup.subtree_control").read_text().split():
            raise CpuCapUnavailable("cgroup v2 here does not delegate the cpu controller to children")
        return ROOT, "v2"
    v1 = ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, "v1"
    raise CpuCapUnavailable("no cgroup cpu controller is mounted (no v2 cpu.max, no v1 cpu.cfs_quota_us)")


def _move_all(source: Path, target: Path) -> None:
    for _ in range(20):  # a process may start a child while they are being moved
        pids = [p for p in (source / "cgroup.procs").read_text().split() if p]
        if not pids:
            return
        for pid in pids:
            try:
                (target / "cgroup.procs").write_text(pid)
            except OSError:  # it exited meanwhile
                continue


@contextmanager
def cpu_capped(pid: int, cores: float) -> Iterator[Path]:
    """Process ``pid`` limited to ``cores`` CPUs' worth of time (0.5: half a core) until leaving."""
    if not 0.01 <= cores <= 64:
        raise ValueError("cores must be in 0.01..64")
    parent, kind = _parent()
    group = parent / f"hearthnet-test-{os.getpid()}-{next(_names)}"
    quota = int(PERIOD_US * cores)
    try:
        group.mkdir()
    except OSError as exc:
        raise CpuCapUnavailable(f"cannot make a cgroup under {parent}: {exc.strerror}") from None
    try:
        try:
            if kind == "v2":
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise CpuCapUnavailable(f"cannot cap the CPU with {group}: {exc.strerror}") from None
        yield group
    finally:
        try:
            _move_all(group, parent)
        finally:
            group.rmdir()


@contextmanager
def busy_cores(count: int | None = None, *, seconds: float = 1800.0) -> Iterator[list[int]]:
    """``count`` processes (default: one per core) spinning until ``seconds`` pass or leaving."""
    n = count if count is not None else (os.cpu_count() or 1)
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(n)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
