"""Work that must be stoppable, in worker processes with CPU-time and memory limits.

A thread cannot be stopped: a parser busy in a hostile file keeps its core until it is done,
whoever gave up on it.  :class:`WorkerProcesses` runs such work in child processes
(:mod:`hearthnet.runtime.process_child`, started with ``subprocess``: nothing of the parent is
forked or re-imported), at most ``processes`` at once, each under an address-space limit and each
job under a CPU-time limit the kernel enforces.  A :class:`Stop` (triggered from the event loop
when a caller's deadline passes or it is cancelled, see :func:`stopped_at`) kills the workers of
its jobs at once; a worker whose job ended cleanly is reused, one that was stopped, failed a limit
or died is replaced.  Up to ``warm`` idle workers are kept started, their imports done, so a job
rarely waits for a process to start.

:meth:`WorkerProcesses.run` is blocking (for a worker thread): it yields the job's items as they
come.  Its errors are :class:`~hearthnet.errors.BusError`: the job's own, the stop's reason, or a
``bad_request`` naming the limit the job went over.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any

import anyio
import anyio.lowlevel

from hearthnet.errors import (
    BadRequest,
    BusError,
    InternalError,
    Partition,
    Timeout,
    error_from_wire,
    unwrap_group,
)
from hearthnet.runtime.process_child import read_frame, write_frame

__all__ = ["Stop", "WorkerProcesses", "stopped_at"]

MAX_FRAME = 64 << 20
"""Bytes of one message from a worker (a page of text is at most a few MiB)."""


class Stop:
    """Stops the jobs of one caller: :meth:`stop` kills their workers and wakes those waiting for one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: set[_Worker] = set()
        self._pools: set[WorkerProcesses] = set()
        self.reason: BusError | None = None

    def stop(self, reason: BusError) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            workers, pools = list(self._workers), list(self._pools)
        for worker in workers:
            worker.kill()
        for pool in pools:
            pool.wake()

    def _attach(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.add(worker)
            stopped = self.reason is not None
        if stopped:
            worker.kill()

    def _detach(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.discard(worker)

    def _waiting_in(self, pool: WorkerProcesses) -> None:
        with self._lock:
            self._pools.add(pool)


@contextlib.asynccontextmanager
async def stopped_at(deadline: float, what: str) -> AsyncIterator[Stop]:
    """A :class:`Stop` triggered when ``deadline`` (``anyio.current_time()``) passes or the block is
    cancelled; leaving the block normally stops nothing still running in it (there should be none)."""
    stop = Stop()
    gave_up = Timeout(f"{what} was stopped: its caller gave up")

    async def watch() -> None:
        try:
            await anyio.sleep_until(deadline)
        except anyio.get_cancelled_exc_class():
            stop.stop(gave_up)
            raise
        stop.stop(Timeout(f"{what} did not finish within the call's deadline: it was stopped"))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            try:
                yield stop
            except Exception:
                if stop.reason is gave_up:  # the caller's cancellation, not this error, is the outcome
                    await anyio.lowlevel.checkpoint()
                raise
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None


class _Worker:
    def __init__(self, argv: list[str]) -> None:
        # -P: the working directory is not put on the child's path (a stray pypdf.py there is
        # never imported); the child finds its modules where this process found them.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, env=env
        )
        self.jobs = 0
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError, OSError):
            self.proc.kill()

    def reap(self) -> int:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        return self.proc.wait()


class WorkerProcesses:
    """At most ``processes`` child processes running jobs (see the module's docstring)."""

    def __init__(
        self,
        name: str,
        *,
        processes: int,
        memory_bytes: int,
        preload: tuple[str, ...] = (),
        warm: int = 1,
        max_jobs: int = 500,
        on_log: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        if processes < 1 or warm < 0 or max_jobs < 1:
            raise ValueError("processes and max_jobs must be positive, warm at least 0")
        self.name = name
        self.processes = processes
        self.memory_bytes = memory_bytes
        self._argv = [
            sys.executable,
            "-P",
            "-m",
            "hearthnet.runtime.process_child",
            str(memory_bytes),
            *preload,
        ]
        self._warm = min(warm, processes)
        self._max_jobs = max_jobs
        self._on_log = on_log
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._closed = False

    # -- the pool ---------------------------------------------------------------------------
    def prestart(self) -> None:
        """Start the ``warm`` idle workers now (they import their modules meanwhile)."""
        with self._cond:
            while not self._closed and len(self._idle) < self._warm and self._count() < self.processes:
                self._idle.append(_Worker(self._argv))

    def busy_pids(self) -> list[int]:
        """The process ids of the workers running a job now."""
        with self._cond:
            return [w.proc.pid for w in self._busy]

    def idle_pids(self) -> list[int]:
        with self._cond:
            return [w.proc.pid for w in self._idle]

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Kill every worker, idle or busy (their jobs fail with ``partition``); idempotent."""
        with self._cond:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.reap() if worker not in self._busy else worker.kill()

    def _count(self) -> int:
        return len(self._idle) + len(self._busy)

    def _lend(self, stop: Stop) -> _Worker:
        stop._waiting_in(self)
        with self._cond:
            while True:
                if self._closed:
                    raise Partition(f"{self.name}: this node is shutting down")
                if stop.reason is not None:
                    raise stop.reason
                while self._idle and self._idle[-1].proc.poll() is not None:
                    self._idle.pop().reap()  # died while idle (killed from outside)
                if self._idle:
                    worker = self._idle.pop()
                    break
                if self._count() < self.processes:
                    worker = _Worker(self._argv)
                    break
                self._cond.wait()
            self._busy.add(worker)
        stop._attach(worker)
        return worker

    def _give_back(self, worker: _Worker, stop: Stop, *, reusable: bool) -> None:
        stop._detach(worker)
        reusable = reusable and not worker.killed and worker.jobs < self._max_jobs
        if not reusable:
            worker.reap()
        with self._cond:
            self._busy.discard(worker)
            if reusable and not self._closed:
                self._idle.append(worker)
            elif not self._closed and len(self._idle) < self._warm and self._count() < self.processes:
                self._idle.append(_Worker(self._argv))  # its replacement, warming up already
            self._cond.notify()
        if reusable and self._closed:
            worker.reap()

    # -- a job ------------------------------------------------------------------------------
    def run(
        self, target: str, args: dict[str, Any], *, cpu_seconds: float, stop: Stop, what: str
    ) -> Generator[Any, None, None]:
        """Blocking: ``target`` (``module:generator_function``) called with ``args`` in a worker,
        its items yielded as they come.  Closing the iterator early kills the worker."""
        worker = self._lend(stop)
        clean = False
        try:
            worker.jobs += 1
            assert worker.proc.stdin is not None and worker.proc.stdout is not None
            try:
                write_frame(worker.proc.stdin, {"target": target, "args": args, "cpu_seconds": cpu_seconds})
            except OSError:
                pass  # it died: the read below says how
            while True:
                message = self._next(worker, stop, what, cpu_seconds)
                if "item" in message:
                    yield message["item"]
                elif "log" in message:
                    if self._on_log is not None:
                        self._on_log(str(message.get("level", "info")), message["log"])
                elif message.get("end"):
                    clean = True
                    return
                elif message.get("memory"):
                    raise BadRequest(
                        f"{what} needed more than the {self.memory_bytes >> 20} MiB of memory a worker "
                        "process may use (the memory limit): the file is damaged or built to blow up"
                    )
                else:
                    clean = True  # the job failed on its own terms: the worker is fine
                    raise error_from_wire(
                        {"error": message.get("error"), "message": message.get("message", "")}
                    )
        finally:
            self._give_back(worker, stop, reusable=clean)

    def _next(self, worker: _Worker, stop: Stop, what: str, cpu_seconds: float) -> dict[str, Any]:
        assert worker.proc.stdout is not None
        try:
            message = read_frame(worker.proc.stdout, MAX_FRAME)
        except (OSError, ValueError):
            message = None
        if isinstance(message, dict):
            return message
        code = worker.reap()
        if stop.reason is not None:
            raise stop.reason
        if code == -signal.SIGXCPU:
            raise BadRequest(
                f"{what} used more than its {cpu_seconds:g} CPU seconds (the CPU-time limit): "
                "the file is damaged or built to blow up"
            )
        if self._closed:
            raise Partition(f"{self.name}: this node is shutting down")
        raise InternalError(f"{what} failed: its worker process ended with code {code}")
