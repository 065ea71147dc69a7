"""Process-wide settings a running node applies to itself (glibc malloc)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from hearthnet.runtime.process_settings import MallocSettings, tune_malloc

GLIBC = platform.libc_ver()[0] == "glibc"


class _Recorder:
    def __init__(self, result: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.result = result

    def __call__(self, option: int, value: int) -> int:
        self.calls.append((option, value))
        return self.result


def test_every_knob_is_set_when_the_environment_is_silent() -> None:
    mallopt = _Recorder()
    applied = tune_malloc(MallocSettings(2, 3 << 20, 9 << 20), environ={}, mallopt=mallopt)
    assert applied == {"arenas": 2, "mmap_threshold": 3 << 20, "trim_threshold": 9 << 20}
    # M_ARENA_MAX, M_MMAP_THRESHOLD and M_TRIM_THRESHOLD from <malloc.h>
    assert sorted(mallopt.calls) == sorted([(-8, 2), (-3, 3 << 20), (-1, 9 << 20)])


def test_an_operators_environment_wins_knob_by_knob() -> None:
    applied = tune_malloc(environ={"MALLOC_ARENA_MAX": "4"}, mallopt=_Recorder())
    assert set(applied) == {"mmap_threshold", "trim_threshold"}
    applied = tune_malloc(environ={"MALLOC_TRIM_THRESHOLD_": "1"}, mallopt=_Recorder())
    assert set(applied) == {"arenas", "mmap_threshold"}
    mallopt = _Recorder()
    assert tune_malloc(environ={"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, mallopt=mallopt) == {}
    assert mallopt.calls == []


def test_a_refused_option_is_not_reported_as_applied() -> None:
    assert tune_malloc(environ={}, mallopt=_Recorder(result=0)) == {}


# The pattern of a node sending a blob: worker threads read 256 KiB chunks, the
# event loop packs, seals and frames each one, a few frames wait to be written.
_SENDER = r"""
import collections, ctypes, os, resource, sys, tempfile
from concurrent.futures import ThreadPoolExecutor
import msgpack
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from hearthnet.runtime.process_settings import tune_malloc

if sys.argv[1] == "tuned":
    assert len(tune_malloc(environ={})) == 3
else:  # the arena cap alone (M_ARENA_MAX), as nodes ran before the thresholds were fixed
    assert ctypes.CDLL(None).mallopt(-8, 2) == 1
aead = ChaCha20Poly1305(os.urandom(32))
folder = tempfile.mkdtemp()
paths = []
for i in range(8):
    path = os.path.join(folder, str(i))
    with open(path, "wb") as f:
        f.write(os.urandom(256 * 1024))
    paths.append(path)
pool = ThreadPoolExecutor(8)

def read(i):
    with open(paths[i % 8], "rb", buffering=0) as f:
        return f.read(256 * 1024 + 1)

def send(n):
    ahead, waiting = collections.deque(), collections.deque()
    for i in range(n + 3):
        if i < n:
            ahead.append(pool.submit(read, i))
        if len(ahead) > 3 or (i >= n and ahead):
            chunk = ahead.popleft().result()
            payload = msgpack.packb({"t": "in", "id": 1, "data": {"data": chunk}})
            waiting.append(b"".join([b"\0\0\0\0", aead.encrypt(i.to_bytes(12, "little"), payload, None)]))
            if len(waiting) > 4:
                waiting.popleft()

send(50)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
send(1000)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 1000)
"""


def _faults(script: str, mode: str) -> float:
    """Run an allocation-pattern script in a fresh interpreter; it prints page faults per unit."""
    out = subprocess.run(
        [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True, timeout=120
    )
    return float(out.stdout)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_fixed_thresholds_stop_chunk_buffers_from_being_faulted_in_again() -> None:
    def faults_per_chunk(mode: str) -> float:
        return _faults(_SENDER, mode)

    # Measured over 12 runs each: 1-23 page faults per chunk (median 12) with glibc's
    # adaptive thresholds, which settle differently from run to run; 0.001-0.32 fixed.
    # The default side only shows the scenario reproduces the problem: best of three.
    default = 0.0
    for _ in range(3):
        default = max(default, faults_per_chunk("default"))
        if default > 3:
            break
    assert default > 3, default
    tuned = max(faults_per_chunk("tuned") for _ in range(2))
    assert tuned < 1.5, tuned


# The pattern of an embedding inference (all-MiniLM-L6-v2, two 256-token rows, onnxruntime
# without its arena): each layer allocates and frees buffers of a few MiB, in two threads.
_INFERENCE = r"""
import ctypes, resource, sys, threading
from hearthnet.runtime.process_settings import MallocSettings, tune_malloc

if sys.argv[1] == "tuned":
    assert len(tune_malloc(environ={})) == 3
else:  # the thresholds nodes used before: 2 MiB / 8 MiB
    assert len(tune_malloc(MallocSettings(2, 2 << 20, 8 << 20), environ={})) == 3
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
SIZES = [6 << 20, 3 << 20, 3 << 20, 1536 << 10, 768 << 10]

def infer(n):
    for _ in range(n):
        held = []
        for size in SIZES:
            p = libc.malloc(size)
            ctypes.memset(p, 1, size)
            held.append(p)
        for p in held:
            libc.free(p)

def run(n):
    threads = [threading.Thread(target=infer, args=(n,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

run(5)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
run(100)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_inference_sized_buffers_stay_on_the_heap() -> None:
    # 14.25 MiB touched per inference is ~3,650 pages: the old thresholds fault nearly all of them in
    # again every time; the tuned ones keep the buffers on the heap.
    assert _faults(_INFERENCE, "old") > 1000
    assert _faults(_INFERENCE, "tuned") < 50
