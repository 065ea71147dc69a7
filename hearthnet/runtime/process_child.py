"""The child side of :mod:`hearthnet.runtime.worker_processes`: ``python -m hearthnet.runtime.process_child``.

It lowers its own limits (address space, no core files), imports the modules it is told to
preload, then runs jobs one after another, each under a CPU-time soft limit (``RLIMIT_CPU``: the
kernel ends the process with ``SIGXCPU`` once it has used its seconds, whatever it is doing).  A
job names a generator function ``module:function`` and its arguments; each item it yields goes
back as a frame, then ``end`` (or the job's error).  Its structlog records go back as frames too,
for the parent to log.  Frames: a 4-byte big-endian length, then msgpack; stdout carries them
(the child's own stdout is pointed at stderr, so a stray print cannot break a frame).
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import struct
import sys
from collections.abc import Iterator, MutableMapping
from typing import IO, Any

import msgpack

__all__ = ["main", "read_frame", "write_frame"]

HEADER = struct.Struct(">I")


def write_frame(out: IO[bytes], message: Any) -> None:
    body = msgpack.packb(message, use_bin_type=True)
    out.write(HEADER.pack(len(body)) + body)
    out.flush()


def read_frame(source: IO[bytes], max_bytes: int) -> Any:
    """The next message, or ``None`` at the end of the stream (a cut frame counts as the end)."""
    head = source.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    if size > max_bytes:
        raise ValueError(f"frame of {size} bytes over the {max_bytes} allowed")
    body = source.read(size)
    if len(body) < size:
        return None
    return msgpack.unpackb(body, raw=False)


def _limit(kind: int, value: int) -> None:
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, hard))


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _forward_logs(out: IO[bytes]) -> None:
    """structlog's records become ``log`` frames (the parent logs them as its own)."""
    import structlog

    def forward(_logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        fields = {
            k: v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
            for k, v in event_dict.items()
        }
        write_frame(out, {"log": fields, "level": method})
        raise structlog.DropEvent

    structlog.configure(processors=[forward], cache_logger_on_first_use=False)


def _run(job: dict[str, Any], out: IO[bytes]) -> None:
    module, _, name = str(job["target"]).partition(":")
    target = getattr(importlib.import_module(module), name)
    _limit(resource.RLIMIT_CPU, int(_cpu_used() + float(job["cpu_seconds"])) + 1)
    items: Iterator[Any] = target(**job["args"])
    for item in items:
        write_frame(out, {"item": item})
    write_frame(out, {"end": True})


def main(argv: list[str]) -> int:
    memory_bytes = int(argv[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    source = os.fdopen(os.dup(0), "rb")
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_AS, memory_bytes)
    _forward_logs(out)
    for module in argv[1:]:
        importlib.import_module(module)
    from hearthnet.errors import BusError

    while True:
        job = read_frame(source, 1 << 31)
        if job is None:
            return 0
        try:
            _run(job, out)
        except BusError as exc:
            write_frame(out, {"error": exc.code, "message": exc.message})
        except MemoryError:
            write_frame(out, {"error": "bad_request", "message": "", "memory": True})
            return 1
        except Exception as exc:  # a reader's bug: the job fails with its type, the worker goes on
            write_frame(
                out, {"error": "internal_error", "message": f"{type(exc).__name__} in a worker process"}
            )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
