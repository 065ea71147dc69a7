"""Jobs for the worker-process tests (imported by the worker: ``tests.unit.runtime.worker_jobs:...``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import structlog

from hearthnet.errors import NotFound


def count(n: int) -> Iterator[int]:
    yield from range(n)


def pid() -> Iterator[int]:
    yield os.getpid()


def spin() -> Iterator[int]:
    yield os.getpid()
    x = 0
    while True:
        x += 1


def hog(mib: int) -> Iterator[int]:
    yield len(bytearray(mib << 20))


def refuse() -> Iterator[int]:
    raise NotFound("no such thing")
    yield 0


def chatty(n: int) -> Iterator[int]:
    for i in range(n):
        structlog.get_logger("test").warning("job_said", i=i)
    yield n
