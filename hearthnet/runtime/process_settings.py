"""Process-wide settings a running node applies to itself before its threads start: the event
loop it runs on, glibc's allocator, and its limit of open files.

Only glibc's allocator is tuned here (``mallopt``); elsewhere (musl, macOS)
nothing changes.  An operator's own choice wins: an environment variable that
glibc reads at start-up leaves the matching knob alone.
"""

from __future__ import annotations

import ctypes
import os
import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MallocSettings",
    "event_loop_options",
    "open_files_limit",
    "raise_open_files_limit",
    "tune_malloc",
]

# From <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


@dataclass(frozen=True, slots=True)
class MallocSettings:
    """glibc malloc knobs for a node (measurements in ``specs/node.md``).

    ``arenas``: threads that allocate at the same time otherwise get arenas of
    their own, up to eight per core, and each keeps the memory freed into it.

    ``mmap_threshold`` and ``trim_threshold``: glibc adjusts both as the
    process runs; with buffers of a blob chunk's size (256 KiB) read in worker
    threads and freed on the event loop it can settle where each such buffer
    is given back to the kernel and faulted in again, page by page.  The mmap
    threshold must also exceed the largest buffer an embedding inference
    allocates and frees (attention scores of two 256-token rows: 6 MiB; one
    512-token row: 12 MiB), and the trim threshold what one inference frees at
    once.  The price is up to 32 MiB of free heap kept per arena.
    """

    arenas: int = 2
    mmap_threshold: int = 16 << 20
    trim_threshold: int = 32 << 20


def tune_malloc(
    settings: MallocSettings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    mallopt: Callable[[int, int], int] | None = None,
) -> dict[str, int]:
    """Apply ``settings`` through ``mallopt``; the knobs actually set, by name.

    A knob is skipped when the environment already chose it
    (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``;
    any ``glibc.malloc`` tunable in ``GLIBC_TUNABLES`` skips all three), and
    nothing is done off glibc.  Must run before worker threads start.
    """
    settings = settings or MallocSettings()
    env = os.environ if environ is None else environ
    if mallopt is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return {}
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return {}
    wanted = (
        ("arenas", _M_ARENA_MAX, settings.arenas, "MALLOC_ARENA_MAX"),
        ("mmap_threshold", _M_MMAP_THRESHOLD, settings.mmap_threshold, "MALLOC_MMAP_THRESHOLD_"),
        ("trim_threshold", _M_TRIM_THRESHOLD, settings.trim_threshold, "MALLOC_TRIM_THRESHOLD_"),
    )
    applied: dict[str, int] = {}
    for name, option, value, variable in wanted:
        if not env.get(variable) and mallopt(option, value):
            applied[name] = value
    return applied


def event_loop_options() -> dict[str, Any]:
    """``anyio.run``'s backend options: uvloop when it is installed (it cuts the bus's per-call
    overhead; see ``specs/bus.md``)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def raise_open_files_limit() -> int:
    """Raise the soft limit of open descriptors to the hard one (a node holds a socket per HTTP
    connection and bus link, besides its files); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return open_files_limit()
    return open_files_limit()


def open_files_limit() -> int:
    """The soft limit of open descriptors (a large number when there is none)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)
