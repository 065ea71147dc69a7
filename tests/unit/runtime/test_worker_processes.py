"""Worker processes: jobs' items stream back; a job's error, a CPU or memory limit, a stop (the
caller's deadline or cancellation) each end the job with its error; a stopped worker is killed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from hearthnet.errors import BadRequest, NotFound, Timeout
from hearthnet.runtime.worker_processes import Stop, WorkerProcesses, stopped_at

JOBS = "tests.unit.runtime.worker_jobs"


@pytest.fixture
def pool() -> Iterator[WorkerProcesses]:
    logs: list[tuple[str, dict[str, Any]]] = []
    p = WorkerProcesses(
        "test", processes=1, memory_bytes=512 << 20, on_log=lambda lv, f: logs.append((lv, f))
    )
    p.logs = logs  # type: ignore[attr-defined]
    try:
        yield p
    finally:
        p.close()


def _run(
    pool: WorkerProcesses, job: str, stop: Stop | None = None, cpu: float = 60.0, **args: Any
) -> list[Any]:
    return list(pool.run(f"{JOBS}:{job}", args, cpu_seconds=cpu, stop=stop or Stop(), what="the job"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_items_come_back_and_the_worker_is_reused(pool: WorkerProcesses) -> None:
    assert _run(pool, "count", n=5) == [0, 1, 2, 3, 4]
    first = _run(pool, "pid")
    assert _run(pool, "pid") == first and pool.idle_pids() == first


def test_a_jobs_own_error_comes_back_typed_and_the_worker_stays(pool: WorkerProcesses) -> None:
    before = _run(pool, "pid")
    with pytest.raises(NotFound, match="no such thing"):
        _run(pool, "refuse")
    assert _run(pool, "pid") == before


def test_a_jobs_log_records_reach_the_parent(pool: WorkerProcesses) -> None:
    assert _run(pool, "chatty", n=3) == [3]
    said = [f for lv, f in pool.logs if f.get("event") == "job_said"]  # type: ignore[attr-defined]
    assert [f["i"] for f in said] == [0, 1, 2] and all(lv == "warning" for lv, _ in pool.logs)  # type: ignore[attr-defined]


def test_the_cpu_limit_ends_a_spinning_job(pool: WorkerProcesses) -> None:
    started = time.process_time()
    with pytest.raises(BadRequest, match=r"used more than its 1 CPU seconds \(the CPU-time limit\)"):
        _run(pool, "spin", cpu=1.0)
    assert time.process_time() - started < 1.0  # the child spun, not this process
    assert pool.busy_pids() == [] and _run(pool, "count", n=1) == [0]  # a new worker


def test_the_memory_limit_ends_a_hungry_job(pool: WorkerProcesses) -> None:
    with pytest.raises(BadRequest, match=r"512 MiB of memory a worker process may use \(the memory limit\)"):
        _run(pool, "hog", mib=1024)
    assert _run(pool, "hog", mib=8) == [8 << 20]


@pytest.mark.anyio
async def test_a_deadline_kills_the_worker_at_the_deadline(pool: WorkerProcesses) -> None:
    pids: list[int] = []
    _run(pool, "pid")  # the worker started: the deadline is the job's, not the interpreter's start
    deadline = 1.0
    started = anyio.current_time()
    with pytest.raises(Timeout, match="the job did not finish within the call's deadline"):
        async with stopped_at(anyio.current_time() + deadline, "the job") as stop:

            def run() -> None:
                for item in pool.run(f"{JOBS}:spin", {}, cpu_seconds=60, stop=stop, what="the job"):
                    pids.append(item)

            await anyio.to_thread.run_sync(run)
    late = anyio.current_time() - started - deadline
    assert -0.05 < late < 1.5, late
    assert pids and not _alive(pids[0]) and pool.busy_pids() == []


@pytest.mark.anyio
async def test_a_stop_wakes_a_job_waiting_for_a_worker(pool: WorkerProcesses) -> None:
    """One worker, held by a spinning job: the second waits, and its stop ends the wait too."""
    held = Stop()
    first = pool.run(f"{JOBS}:spin", {}, cpu_seconds=60, stop=held, what="the job")
    pid = next(first)
    try:
        with pytest.raises(Timeout):
            async with stopped_at(anyio.current_time() + 0.5, "the second job") as stop:
                await anyio.to_thread.run_sync(lambda: _run(pool, "count", stop=stop, n=1))
    finally:
        held.stop(Timeout("done"))
        with pytest.raises(Timeout):
            next(first)
    assert not _alive(pid)
